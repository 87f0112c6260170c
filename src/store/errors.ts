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

export class ConflictError extends Error {
  readonly code: string;
  readonly pointer: string | undefined;
  constructor(code: string, message: string, pointer?: string) {
    super(message);
    this.code = code;
    this.pointer = pointer;
  }
}
