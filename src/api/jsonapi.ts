/**
 * JSON:API documents and errors. Every error the API answers is a JSON:API error object with a
 * stable `code` and, where one field is at fault, `source.pointer` (body) or `source.parameter`
 * (query string).
 */
import type { ErrorObject } from 'ajv';

export const JSONAPI_MEDIA_TYPE = 'application/vnd.api+json';

export interface ErrorSource {
  pointer?: string;
  parameter?: string;
  header?: string;
}

export interface JsonApiErrorObject {
  status: string;
  code: string;
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

/** An error the API answers as it is; thrown anywhere in a handler. */
export class ApiError extends Error {
  readonly status: number;
  readonly errors: JsonApiErrorObject[];
  readonly headers: Record<string, string>;

  constructor(status: number, code: string, detail: string, source?: ErrorSource, headers: Record<string, string> = {}) {
    super(detail);
    this.status = status;
    this.errors = [errorObject(status, code, detail, source)];
    this.headers = headers;
  }

  static many(status: number, errors: JsonApiErrorObject[]): ApiError {
    const error = new ApiError(status, errors[0]?.code ?? 'ERROR', errors[0]?.detail ?? '');
    error.errors.splice(0, 1, ...errors);
    return error;
  }
}

export function errorObject(status: number, code: string, detail: string, source?: ErrorSource): JsonApiErrorObject {
  return { status: String(status), code, title: TITLES[status] ?? 'Error', detail, ...(source && { source }) };
}

/** A body's `relationships.belongsTo` may name the account, but only the token's own. */
export function checkAccount(relationships: { belongsTo: { data: { id: string } } } | undefined, tenantId: string): void {
  const accountId = relationships?.belongsTo.data.id;
  if (accountId !== undefined && accountId !== tenantId) {
    throw new ApiError(403, 'FOREIGN_ACCOUNT', 'the account is not the one of this access token', {
      pointer: '/data/relationships/belongsTo/data/id',
    });
  }
}

export const notFound = (what: string, id: string) => new ApiError(404, 'NOT_FOUND', `${what} ${id} does not exist`);

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
    result.push(errorObject(location === 'body' ? 422 : 400, 'INVALID_VALUE', `${where} ${detail}`, source));
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
      return !errors.some((other) => other !== error && other.instancePath.startsWith(error.instancePath) && other.keyword !== 'anyOf' && other.keyword !== 'oneOf' && !(other.keyword === 'type' && other.params.type === 'null'));
    }
    // "must be null" comes from the nullable branch of an optional object: noise when the value is an object.
    if (error.keyword === 'type' && error.params.type === 'null' && unionPaths.has(error.instancePath)) return false;
    return true;
  });
}

const escapePointer = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');
const unescapePointer = (segment: string) => segment.replace(/~1/g, '/').replace(/~0/g, '~');
