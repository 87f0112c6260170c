/**
 * The one validator of the API: Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) compiles the
 * same TypeBox schemas that the OpenAPI document is generated from.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { Type, type TSchema, type Static, type TUnsafe } from '@sinclair/typebox';
import { ApiError, validationErrors } from '../jsonapi.ts';

// ajv-formats is CommonJS with a default export that TypeScript's nodenext view sees as the module.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

function makeAjv(coerceTypes: boolean): Ajv2020 {
  const ajv = new Ajv2020({
    allErrors: true,
    useDefaults: true,
    discriminator: true,
    coerceTypes,
    // TypeBox adds keywords (readOnly, description...) that are annotations, not constraints.
    strict: false,
  });
  addFormats(ajv);
  return ajv;
}

/** Bodies: no type coercion (a port sent as "80" is an error), defaults filled in. */
export const bodyAjv = makeAjv(false);
/** Query strings and path parameters arrive as text: "100" may be the integer 100. */
export const queryAjv = makeAjv(true);

const compiled = new WeakMap<object, ValidateFunction>();

/** Validates a request body against a schema (defaults are applied in place) or throws a 422 ApiError. */
export function validateBody<T extends TSchema>(schema: T, value: unknown): Static<T> {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = bodyAjv.compile(schema);
    compiled.set(schema, validate);
  }
  if (!validate(value)) throw ApiError.many(validationErrors(validate.errors ?? [], 'body'));
  return value as Static<T>;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The frame every JSON:API request body shares, checked before the route's own schema and before
 * any handler reads it: an object whose `data` is an object. A body that is not (null, a string,
 * an array, `{"data": null}`) is a 422 pointing at the part at fault.
 */
export function checkDocumentFrame(body: unknown): void {
  if (!isPlainObject(body)) {
    throw new ApiError('INVALID_VALUE', 'the body must be a JSON:API document: an object with a `data` object', { pointer: '/' });
  }
  if (!('data' in body)) throw new ApiError('INVALID_VALUE', '/data is required', { pointer: '/data' });
  if (!isPlainObject(body.data)) throw new ApiError('INVALID_VALUE', '/data must be an object (one resource)', { pointer: '/data' });
}

const DOCUMENT_ONLY = 'x-document-only';

/**
 * A schema that documents a body in OpenAPI but that the route checks itself, for routes whose
 * errors follow another standard (the token endpoint answers RFC 6749 errors).
 */
export function documentOnly(schema: TSchema): TUnsafe<unknown> {
  return Type.Unsafe<unknown>({ ...schema, [DOCUMENT_ONLY]: true });
}

export function isDocumentOnly(schema: unknown): boolean {
  return typeof schema === 'object' && schema !== null && DOCUMENT_ONLY in schema;
}
