/**
 * The origin's response headers for the client: the in-place form (the origin client's own lists)
 * gives what the copying form gives, on generated lists of hop-by-hop, listed and other fields.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
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
