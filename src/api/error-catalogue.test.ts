import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { API_ERRORS, apiErrorCodeSchema, isApiErrorCode, type ApiErrorCode, type ApiErrorKind } from './error-catalogue.ts';
import { errorObject } from './jsonapi.ts';
import type { ConflictCode } from '../store/errors.ts';
import type { AcmeOrderProblemCode } from '../store/acme-order-checks.ts';
import type { CertificateCheckCode } from '../certs/x509.ts';

/** Codes other layers raise and the API answers as they are; EMAIL_TAKEN comes from `tps user create` only. */
type RaisedElsewhere = Exclude<ConflictCode, 'EMAIL_TAKEN'> | AcmeOrderProblemCode | CertificateCheckCode;
const everyRaisedCodeIsListed: [Exclude<RaisedElsewhere, ApiErrorCode>] extends [never] ? true : false = true;

const entries = Object.entries(API_ERRORS) as [ApiErrorCode, ApiErrorKind][];

test('the codes the store and the certificate checks raise are in the catalogue (checked by the type checker)', () => {
  assert.equal(everyRaisedCodeIsListed, true);
});

test('the contract names of DESIGN.md are in the catalogue with their statuses', () => {
  const contract: Record<string, number> = { PORT_IN_USE: 409, ORIGIN_NOT_ALLOWED: 422, DOMAIN_CLAIMED: 409, QUOTA_EXCEEDED: 409 };
  for (const [code, status] of Object.entries(contract)) {
    assert.ok(isApiErrorCode(code), code);
    assert.equal(API_ERRORS[code].status, status, code);
  }
});

test('an error object takes its status from the catalogue, and its title from the status', () => {
  assert.deepEqual(errorObject('PORT_IN_USE', 'port 80/TCP is taken', { pointer: '/data/attributes/frontend/port' }), {
    status: '409',
    code: 'PORT_IN_USE',
    title: 'Conflict',
    detail: 'port 80/TCP is taken',
    source: { pointer: '/data/attributes/frontend/port' },
  });
  assert.equal(errorObject('INVALID_VALUE', 'page[size] must be <= 1000', { parameter: 'page[size]' }, 400).status, '400');
});

test('every entry has a status of an error, a title and a description', () => {
  for (const [code, kind] of entries) {
    assert.match(code, /^[A-Z][A-Z_]*[A-Z]$/);
    for (const status of [kind.status, kind.alsoStatus ?? kind.status]) assert.ok(status >= 400 && status <= 599, code);
    assert.ok(kind.title.length > 0 && kind.description.length > 0, code);
  }
});

test('the OpenAPI schema ApiErrorCode lists every code with its statuses', () => {
  const schema = apiErrorCodeSchema() as { oneOf: { const: string; 'x-status': number[] }[] };
  assert.deepEqual(
    schema.oneOf.map((entry) => [entry.const, entry['x-status']]),
    entries.map(([code, kind]) => [code, kind.alsoStatus === undefined ? [kind.status] : [kind.status, kind.alsoStatus]]),
  );
});

test('docs/decisions.md lists exactly the catalogue, with the same statuses', () => {
  const decisions = fs.readFileSync(new URL('../../docs/decisions.md', import.meta.url), 'utf8');
  const rows = [...decisions.matchAll(/^\| `([A-Z_]+)` \| ([0-9, ]+) \|/gm)].map((match) => [match[1], match[2]!.trim()]);
  assert.deepEqual(
    rows,
    entries.map(([code, kind]) => [code, kind.alsoStatus === undefined ? `${kind.status}` : `${kind.status}, ${kind.alsoStatus}`]),
  );
});
