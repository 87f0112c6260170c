/**
 * The origin's response headers for the client: the in-place form (the origin client's own lists)
 * gives what the copying form gives, on generated lists of hop-by-hop, listed and other fields.
 * And `isNamed`, the name comparison without a lower-case copy, against `toLowerCase`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isNamed } from './header-name.ts';
import { clientResponseHeaders, clientResponseHeadersInPlace } from './headers.ts';

const name = fc.constantFrom(
  'Connection',
  'connection',
  'Keep-Alive',
  'TE',
  'Trailer',
  'Upgrade',
  'Proxy-Connection',
  'Transfer-Encoding',
  'X-Listed',
  'x-other',
  'Content-Length',
  'Server',
  'ab',
  'Set-Cookie',
);
const value = fc.oneof(
  fc.constantFrom('close', 'keep-alive', 'X-Listed', 'x-listed, close', ' x-other ,server', 'upgrade', '', 'chunked'),
  fc.string({ maxLength: 8 }),
);

describe('clientResponseHeadersInPlace', () => {
  it('drops what clientResponseHeaders drops, keeps the rest in order', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(name, value), { maxLength: 12 }), (pairs) => {
        const flat = pairs.flat();
        const expected = clientResponseHeaders(flat);
        assert.deepEqual(clientResponseHeadersInPlace([...flat]), expected);
      }),
      { numRuns: 5_000 },
    );
  });
});

describe('isNamed', () => {
  const names = ['host', 'date', 'connection', 'content-length', 'transfer-encoding', 'x-request-id', 'x-forwarded-for'];
  /** A name of the same length: the same letters in any case, or some of them changed to any latin1 character. */
  const candidate = fc
    .tuple(fc.constantFrom(...names), fc.array(fc.tuple(fc.boolean(), fc.option(fc.integer({ min: 0, max: 255 }), { freq: 4 }))))
    .map(([lower, edits]) => ({
      lower,
      name: [...lower]
        .map((c, i) => {
          const [upper, replacement] = edits[i] ?? [false, null];
          return replacement !== null ? String.fromCharCode(replacement) : upper ? c.toUpperCase() : c;
        })
        .join(''),
    }));

  it('says what toLowerCase says for latin1 names of the same length', () => {
    fc.assert(
      fc.property(candidate, ({ name, lower }) => {
        assert.equal(isNamed(name, lower), name.toLowerCase() === lower);
      }),
      { numRuns: 20_000 },
    );
    for (const lower of names) {
      for (let c = 0; c < 256; c++) {
        const name = String.fromCharCode(c) + lower.slice(1);
        assert.equal(isNamed(name, lower), name.toLowerCase() === lower, `${c} in ${lower}`);
      }
    }
  });
});
