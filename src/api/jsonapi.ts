/**
 * JSON:API documents and errors. Every error the API answers is a JSON:API error object with a
 * stable `code` of the error catalogue (./error-catalogue.ts), the status the catalogue gives it
 * and, where one field is at fault, `source.pointer` (body) or `source.parameter` (query string).
 */
import type { ErrorObject } from 'ajv';
import { API_ERRORS, type ApiErrorCode } from './error-catalogue.ts';

export const JSONAPI_MEDIA_TYPE = 'application/vnd.api+json';

export interface ErrorSource {
  pointer?: string;
  parameter?: string;
  header?: string;
}

/** An error object; a client reading another service's answers sees codes as plain strings. */
export interface JsonApiErrorObject<Code extends string = ApiErrorCode> {
  status: string;
  code: Code;
  title: string;
  detail: string;
  source?: ErrorSource;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Entity',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** An error the API answers as it is, with the status the catalogue gives its code; thrown anywhere in a handler. */
export class ApiError extends Error {
  readonly errors: JsonApiErrorObject[];
  readonly headers: Record<string, string>;

  constructor(code: ApiErrorCode, detail: string, source?: ErrorSource, headers: Record<string, string> = {}) {
    super(detail);
    this.errors = [errorObject(code, detail, source)];
    this.headers = headers;
  }

  /** The answer's status: its first error's (the errors of one answer share it). */
  get status(): number {
    return Number(this.errors[0]!.status);
  }

  static many(errors: readonly JsonApiErrorObject[]): ApiError {
    const [first] = errors;
    if (first === undefined) throw new Error('an ApiError needs at least one error object');
    const error = new ApiError(first.code, first.detail);
    error.errors.splice(0, error.errors.length, ...errors);
    return error;
  }
}

/**
 * One error object. `status` is the catalogue's for the code unless given: the few codes that have
 * a second status (INVALID_VALUE in a query string, BAD_REQUEST) pass it.
 */
export function errorObject(
  code: ApiErrorCode,
  detail: string,
  source?: ErrorSource,
  status: number = API_ERRORS[code].status,
): JsonApiErrorObject {
  return { status: String(status), code, title: TITLES[status] ?? 'Error', detail, ...(source && { source }) };
}

/** A body's `relationships.belongsTo` may name the account, but only the token's own. */
export function checkAccount(relationships: { belongsTo: { data: { id: string } } } | undefined, tenantId: string): void {
  const accountId = relationships?.belongsTo.data.id;
  if (accountId !== undefined && accountId !== tenantId) {
    throw new ApiError('FOREIGN_ACCOUNT', 'the account is not the one of this access token', {
      pointer: '/data/relationships/belongsTo/data/id',
    });
  }
}

export const notFound = (what: string, id: string) => new ApiError('NOT_FOUND', `${what} ${id} does not exist`);

/** Turns schema validation errors into JSON:API errors pointing at the offending fields. */
export function validationErrors(errors: readonly ErrorObject[], location: 'body' | 'querystring' | 'params'): JsonApiErrorObject[] {
  const seen = new Set<string>();
  const result: JsonApiErrorObject[] = [];
  for (const error of relevantErrors(errors)) {
    let path = error.instancePath;
    let detail = error.message ?? 'is invalid';
    if (error.keyword === 'additionalProperties') {
      path += `/${escapePointer(String(error.params.additionalProperty))}`;
      detail = 'is not a known attribute here';
    } else if (error.keyword === 'required') {
      path += `/${escapePointer(String(error.params.missingProperty))}`;
      detail = 'is required';
    } else if (error.keyword === 'enum' || error.keyword === 'const') {
      const allowed = (error.params.allowedValues as unknown[] | undefined) ?? [error.params.allowedValue];
      detail =
        allowed.length > 12
          ? `is not one of the ${allowed.length} allowed values (listed in /openapi.json)`
          : `must be one of ${allowed.map((value) => JSON.stringify(value)).join(', ')}`;
    } else if (error.keyword === 'discriminator') {
      path += `/${String(error.params.tag)}`;
      detail = 'must be "httpProxy" or "l4Proxy"';
    }
    const key = `${path}|${detail}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const source: ErrorSource =
      location === 'body'
        ? { pointer: path || '/' }
        : { parameter: path.split('/').filter(Boolean).map(unescapePointer).join('.') || location };
    const where = source.pointer ?? source.parameter;
    result.push(errorObject('INVALID_VALUE', `${where} ${detail}`, source, location === 'body' ? 422 : 400));
  }
  return result;
}

/**
 * A union (anyOf) that fails reports every branch; keep the errors of the branch that got furthest,
 * so that `{"mode": "BLOK"}` says "mode must be one of ..." rather than also "must be null".
 */
function relevantErrors(errors: readonly ErrorObject[]): ErrorObject[] {
  const unionPaths = new Set(errors.filter((e) => e.keyword === 'anyOf' || e.keyword === 'oneOf').map((e) => e.instancePath));
  return errors.filter((error) => {
    if (error.keyword === 'anyOf' || error.keyword === 'oneOf') {
      // Keep the union error only when no branch said anything more precise.
      return !errors.some(
        (other) =>
          other !== error &&
          other.instancePath.startsWith(error.instancePath) &&
          other.keyword !== 'anyOf' &&
          other.keyword !== 'oneOf' &&
          !(other.keyword === 'type' && other.params.type === 'null'),
      );
    }
    // "must be null" comes from the nullable branch of an optional object: noise when the value is an object.
    if (error.keyword === 'type' && error.params.type === 'null' && unionPaths.has(error.instancePath)) return false;
    return true;
  });
}

const escapePointer = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');
const unescapePointer = (segment: string) => segment.replace(/~1/g, '/').replace(/~0/g, '~');
