/** Domain errors the store raises; the API maps each to a JSON:API error with a pointer. */
export class NotFoundError extends Error {
  readonly resource: string;
  readonly id: string;
  constructor(resource: string, id: string) {
    super(`${resource} ${id} not found`);
    this.resource = resource;
    this.id = id;
  }
}

/** What a write conflicts with; the API answers each as a 409 with this code (EMAIL_TAKEN: `tps user create` only). */
export type ConflictCode = 'PORT_IN_USE' | 'CONCURRENT_DELETE' | 'QUOTA_EXCEEDED' | 'EMAIL_TAKEN';

export class ConflictError extends Error {
  readonly code: ConflictCode;
  readonly pointer: string | undefined;
  constructor(code: ConflictCode, message: string, pointer?: string) {
    super(message);
    this.code = code;
    this.pointer = pointer;
  }
}
