import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import zlib from 'node:zlib';
import { contentCodings, decodeForInspection } from './response-decoding.ts';

const PAGE = Buffer.from(`<html><body>${'You have an error in your SQL syntax; check the manual. '.repeat(50)}</body></html>`);

describe('response bodies decoded for inspection', () => {
  it('reads the codings a proxy can undo, and refuses the others', () => {
    assert.deepEqual(contentCodings(undefined), []);
    assert.deepEqual(contentCodings('identity'), []);
    assert.deepEqual(contentCodings('GZIP'), ['gzip']);
    assert.deepEqual(contentCodings('gzip, br'), ['gzip', 'br']);
    assert.equal(contentCodings('compress'), undefined);
    assert.equal(contentCodings('gzip, gzip, gzip'), undefined);
  });

  const encoded: [string, Buffer][] = [
    ['gzip', zlib.gzipSync(PAGE)],
    ['deflate', zlib.deflateSync(PAGE)],
    ['deflate', zlib.deflateRawSync(PAGE)],
    ['br', zlib.brotliCompressSync(PAGE)],
    ['zstd', zlib.zstdCompressSync(PAGE)],
    ['gzip, br', zlib.brotliCompressSync(zlib.gzipSync(PAGE))],
  ];
  for (const [coding, body] of encoded) {
    it(`undoes ${coding} (${body.length} bytes)`, async () => {
      const decoded = await decodeForInspection(body, contentCodings(coding)!, 1 << 20);
      assert.equal(decoded.body.toString(), PAGE.toString());
      assert.equal(decoded.truncated, false);
    });
  }

  it('stops at the limit: the first bytes only, marked truncated', async () => {
    const decoded = await decodeForInspection(zlib.gzipSync(PAGE), ['gzip'], 100);
    assert.equal(decoded.body.toString(), PAGE.subarray(0, 100).toString());
    assert.equal(decoded.truncated, true);
  });

  it('decodes the start of a body cut short (the part the proxy held)', async () => {
    const whole = zlib.gzipSync(PAGE);
    const decoded = await decodeForInspection(whole.subarray(0, Math.floor(whole.length / 2)), ['gzip'], 1 << 20);
    // Whether the body went on is the caller's to say (it knows the part was cut).
    assert.ok(decoded.body.length > 0 && PAGE.toString().startsWith(decoded.body.toString()));
  });

  it('a bomb (1 GiB of zeros in about 1 MiB) is not inflated past the limit', async () => {
    // 64 MiB compressed once gives a body that repeats; 16 copies of its stream stand for 1 GiB.
    const part = zlib.gzipSync(Buffer.alloc(64 << 20), { level: 9 });
    const bomb = Buffer.concat(Array.from({ length: 16 }, () => part));
    const before = process.memoryUsage().arrayBuffers;
    const decoded = await decodeForInspection(bomb, ['gzip'], 64 * 1024);
    const grown = process.memoryUsage().arrayBuffers - before;
    assert.equal(decoded.body.length, 64 * 1024);
    assert.equal(decoded.truncated, true);
    assert.ok(grown < 32 << 20, `memory grew by ${grown} bytes`);
  });

  it('a corrupt body yields what decoded before the damage', async () => {
    const decoded = await decodeForInspection(Buffer.from('not gzip at all'), ['gzip'], 1024);
    assert.equal(decoded.body.length, 0);
    assert.equal(decoded.truncated, true);
  });
});
