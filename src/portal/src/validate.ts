/**
 * The proxy forms check a body against the very schema the API validates it with
 * (@tps/model, bundled into the portal), so a mistake is shown beside its
 * field before the request is sent, with the API's wording and pointers. This interprets the
 * JSON Schema keywords those schemas use; no code is generated at run time (the page's CSP forbids
 * eval). The API stays the judge: what a schema cannot say (front-end IP pool, certificate ids,
 * port clashes) comes back from it and is shown the same way.
 */
import type { FieldError } from './ui.tsx';

type Schema = Record<string, unknown>;

const FORMATS: Record<string, RegExp> = {
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  ipv4: /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/,
  hostname: /^(?=.{1,253}\.?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-0-9a-z]{0,61}[0-9a-z])?)*\.?$/i,
  uri: /^[a-z][a-z0-9+.-]*:[^\s]*$/i,
};

function isIpv6(value: string): boolean {
  try {
    return new URL(`http://[${value}]/`).hostname.length > 2;
  } catch {
    return false;
  }
}

const typeOf = (value: unknown): string =>
  value === null ? 'null' : Array.isArray(value) ? 'array' : Number.isInteger(value) ? 'integer' : typeof value;

/** Errors of `value` against `schema`, each with the JSON pointer the API would name. */
export function validate(schema: Schema, value: unknown, pointer = ''): FieldError[] {
  const errors: FieldError[] = [];
  const fail = (message: string, at = pointer) => errors.push({ pointer: at || '/', message });

  const types = schema.type === undefined ? undefined : ([] as string[]).concat(schema.type as string | string[]);
  if (types) {
    const actual = typeOf(value);
    const ok = types.some((type) => type === actual || (type === 'number' && actual === 'integer'));
    if (!ok) {
      fail(`must be ${types.filter((type) => type !== 'null').join(' or ')}`);
      return errors;
    }
  }
  if (value === null) return errors;

  if (schema.const !== undefined && value !== schema.const) fail(`must be one of ${JSON.stringify(schema.const)}`);
  const allowed = schema.enum as unknown[] | undefined;
  if (allowed && !allowed.includes(value)) {
    fail(
      allowed.length > 12
        ? `is not one of the ${allowed.length} allowed values`
        : `must be one of ${allowed.map((entry) => JSON.stringify(entry)).join(', ')}`,
    );
  }

  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum) fail(`must be >= ${schema.minimum}`);
    if (typeof schema.maximum === 'number' && value > schema.maximum) fail(`must be <= ${schema.maximum}`);
  }

  if (typeof value === 'string') {
    const length = [...value].length;
    if (typeof schema.minLength === 'number' && length < schema.minLength) fail(`must NOT have fewer than ${schema.minLength} characters`);
    if (typeof schema.maxLength === 'number' && length > schema.maxLength) fail(`must NOT have more than ${schema.maxLength} characters`);
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern, 'u').test(value)) fail(`must match pattern "${schema.pattern}"`);
    const format = schema.format as string | undefined;
    if (format === 'ipv6' ? !isIpv6(value) : format && FORMATS[format] && !FORMATS[format].test(value))
      fail(`must match format "${format}"`);
  }

  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems) fail(`must NOT have fewer than ${schema.minItems} items`);
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) fail(`must NOT have more than ${schema.maxItems} items`);
    if (schema.uniqueItems === true) {
      const seen = new Set(value.map((item) => JSON.stringify(item)));
      if (seen.size !== value.length) fail('must NOT have duplicate items');
    }
    if (schema.items && typeof schema.items === 'object') {
      for (const [index, item] of value.entries()) errors.push(...validate(schema.items as Schema, item, `${pointer}/${index}`));
    }
  }

  if (typeOf(value) === 'object') {
    const object = value as Record<string, unknown>;
    const properties = (schema.properties ?? {}) as Record<string, Schema>;
    for (const name of (schema.required as string[] | undefined) ?? []) {
      if (object[name] === undefined) fail('is required', `${pointer}/${name}`);
    }
    for (const [name, item] of Object.entries(object)) {
      if (item === undefined) continue;
      const property = properties[name];
      if (property) errors.push(...validate(property, item, `${pointer}/${name}`));
      else if (schema.additionalProperties === false) fail('is not a known attribute here', `${pointer}/${name}`);
    }
  }

  // oneOf with a discriminator: the branch whose discriminator property matches.
  const branches = schema.oneOf as Schema[] | undefined;
  const discriminator = (schema.discriminator as { propertyName?: string } | undefined)?.propertyName;
  if (branches && discriminator) {
    const tag = (value as Record<string, unknown>)[discriminator];
    const branch = branches.find((candidate) => ((candidate.properties as Record<string, Schema>)[discriminator]?.const ?? null) === tag);
    if (branch) errors.push(...validate(branch, value, pointer));
    else
      fail(
        `must be one of ${branches.map((candidate) => JSON.stringify((candidate.properties as Record<string, Schema>)[discriminator]?.const)).join(', ')}`,
        `${pointer}/${discriminator}`,
      );
  }
  const anyOf = schema.anyOf as Schema[] | undefined;
  if (anyOf) {
    const results = anyOf.map((candidate) => validate(candidate, value, pointer));
    if (!results.some((result) => result.length === 0)) {
      errors.push(...results.reduce((best, result) => (result.length < best.length ? result : best)));
    }
  }
  return errors;
}
