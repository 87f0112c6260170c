/**
 * The request-head scan of the early refusal path, by property: for any pipelined requests cut
 * into any chunks, one answer per head in order, none for a body, and the end after a head that
 * announces one; for any bytes, no throw and nothing read beyond what is there or beyond the limit.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { HeadScanner, nextHead, type HeadScan } from './request-heads.ts';

const MAX_HEAD = 2048;

interface Answer {
  head: boolean;
  close: boolean;
}

/** What the early path does with chunks as they arrive: the answers given, and whether it ended. */
function drive(chunks: readonly Buffer[]): { answers: Answer[]; ended: 'no' | 'close' | 'bad' } {
  const answers: Answer[] = [];
  let pending = Buffer.alloc(0);
  for (const chunk of chunks) {
    const buffer = Buffer.concat([pending, chunk]);
    pending = Buffer.alloc(0);
    let from = 0;
    for (;;) {
      const scan: HeadScan = nextHead(buffer, from, MAX_HEAD);
      if (scan.kind === 'incomplete') {
        assert.ok(scan.start >= from && scan.start <= buffer.length);
        assert.ok(buffer.length - scan.start <= MAX_HEAD, 'never holds more than the limit');
        pending = buffer.subarray(scan.start);
        break;
      }
      if (scan.kind === 'bad') return { answers, ended: 'bad' };
      assert.ok(scan.next > from && scan.next <= buffer.length);
      answers.push({ head: scan.head, close: scan.close });
      if (scan.close) return { answers, ended: 'close' };
      from = scan.next;
    }
  }
  return { answers, ended: 'no' };
}

/** Cuts `bytes` at the given positions. */
function cut(bytes: Buffer, positions: readonly number[]): Buffer[] {
  const points = [...new Set(positions.map((p) => p % (bytes.length + 1)))].sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let at = 0;
  for (const point of points) {
    chunks.push(bytes.subarray(at, point));
    at = point;
  }
  chunks.push(bytes.subarray(at));
  return chunks;
}

const token = fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/);
const fieldName = token.filter((name) => !/^(content-length|transfer-encoding|connection)$/i.test(name));
const fieldValue = fc.stringMatching(/^[\x21-\x7e]([\x20-\x7e]{0,30}[\x21-\x7e])?$/);
const request = fc.record({
  method: fc.constantFrom('GET', 'HEAD', 'OPTIONS', 'DELETE', 'PURGE'),
  path: fc.stringMatching(/^\/[\x21-\x7e]{0,40}$/),
  fields: fc.array(fc.tuple(fieldName, fieldValue), { maxLength: 6 }),
  emptyLinesBefore: fc.constantFrom('', '', '', '\r\n'),
});
type Request = typeof request extends fc.Arbitrary<infer R> ? R : never;

function serialize(r: Request, extra = ''): string {
  return `${r.emptyLinesBefore}${r.method} ${r.path} HTTP/1.1\r\nHost: site.test\r\n${r.fields.map(([n, v]) => `${n}: ${v}\r\n`).join('')}${extra}\r\n`;
}

describe('request heads of the early refusal path', () => {
  it('answers each of any pipelined requests once, in order, however the bytes are cut', () => {
    fc.assert(
      fc.property(fc.array(request, { minLength: 1, maxLength: 8 }), fc.array(fc.nat(), { maxLength: 10 }), (requests, cuts) => {
        const bytes = Buffer.from(requests.map((r) => serialize(r)).join(''), 'latin1');
        const { answers, ended } = drive(cut(bytes, cuts));
        assert.equal(ended, 'no');
        assert.deepEqual(
          answers,
          requests.map((r) => ({ head: r.method === 'HEAD', close: false })),
        );
      }),
    );
  });

  it('ends after a head that announces a body or asks to close, whatever follows', () => {
    const last = fc.constantFrom(
      'Content-Length: 24\r\n',
      'content-length : 0\r\n',
      'Transfer-Encoding: chunked\r\n',
      'TRANSFER-ENCODING: gzip, chunked\r\n',
      'Connection: close\r\n',
      'Connection: keep-alive, Close\r\n',
    );
    fc.assert(
      fc.property(
        fc.array(request, { maxLength: 4 }),
        request,
        last,
        fc.array(request, { maxLength: 4 }),
        fc.array(fc.nat(), { maxLength: 6 }),
        (before, closing, field, after, cuts) => {
          // What follows could be a body that looks like requests: none of it may be answered.
          const text = before.map((r) => serialize(r)).join('') + serialize(closing, field) + after.map((r) => serialize(r)).join('');
          const { answers, ended } = drive(cut(Buffer.from(text, 'latin1'), cuts));
          assert.equal(ended, 'close');
          assert.equal(answers.length, before.length + 1);
          assert.equal(answers.at(-1)!.close, true);
        },
      ),
    );
  });

  it('ends after an HTTP/1.0 request, and refuses what is not an HTTP/1.x request head', () => {
    assert.deepEqual(drive([Buffer.from('GET / HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\n\r\n')]), {
      answers: [{ head: false, close: true }],
      ended: 'close',
    });
    for (const bad of [
      'GET / HTTP/2.0\r\n\r\n',
      'GET /\r\n\r\n',
      'GET  / HTTP/1.1\r\n\r\n',
      'G(T / HTTP/1.1\r\n\r\n',
      'GET / HTTP/1.1\nHost: x\r\n\r\n',
      'GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n',
      'GET / HTTP/1.1\r\nX: y\nContent-Length: 5\r\n\r\nGET / HTTP/1.1\r\n\r\n',
      `GET /${'a'.repeat(MAX_HEAD)} HTTP/1.1\r\n\r\n`,
    ]) {
      assert.equal(drive([Buffer.from(bad, 'latin1')]).ended, 'bad', JSON.stringify(bad.slice(0, 60)));
    }
    assert.equal(drive([Buffer.from('x'.repeat(MAX_HEAD + 1))]).ended, 'bad', 'no end of head within the limit');
  });

  it('never throws nor reads past the bytes on any input', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 6 }), (chunks) => {
        drive(chunks.map((c) => Buffer.from(c)));
      }),
    );
    const alphabet = fc.constantFrom(
      '\r',
      '\n',
      '\r\n',
      '\r\n\r\n',
      'GET ',
      'HEAD ',
      '/ ',
      'HTTP/1.1',
      'HTTP/1.0',
      'a: b',
      'Content-Length: 1',
      ' ',
    );
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 40 }), fc.array(fc.nat(), { maxLength: 8 }), (parts, cuts) => {
        drive(cut(Buffer.from(parts.join(''), 'latin1'), cuts));
      }),
      { numRuns: 2000 },
    );
  });

  it('scans as nextHead when it remembers the last head, over any sequence of buffers', () => {
    const alphabet = fc.constantFrom(
      '\r',
      '\n',
      '\r\n',
      '\r\n\r\n',
      'GET ',
      'HEAD ',
      '/ ',
      'HTTP/1.1',
      'HTTP/1.0',
      'a: b',
      'Content-Length: 1',
      ' ',
    );
    const bytes = fc.oneof(
      fc.array(request, { minLength: 1, maxLength: 4 }).map((requests) => requests.map((r) => serialize(r)).join('')),
      fc.array(alphabet, { maxLength: 30 }).map((parts) => parts.join('')),
      // The same head again, then one differing from it by a byte, or longer than the limit.
      fc.constantFrom('GET / HTTP/1.1\r\nHost: a\r\n\r\n', 'GET / HTTP/1.1\r\nHost: b\r\n\r\n', 'GET / HTTP/1.0\r\nHost: a\r\n\r\n'),
      fc.constant(`GET /${'a'.repeat(MAX_HEAD)} HTTP/1.1\r\n\r\n`),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(bytes, fc.nat()), { minLength: 1, maxLength: 12 }), (inputs) => {
        const scanner = new HeadScanner(MAX_HEAD);
        for (const [text, at] of inputs) {
          const buffer = Buffer.from(text, 'latin1');
          let from = at % (buffer.length + 1);
          for (;;) {
            const expected = nextHead(buffer, from, MAX_HEAD);
            assert.deepEqual(scanner.next(buffer, from), expected);
            if (expected.kind !== 'head') break;
            from = expected.next;
          }
        }
      }),
      { numRuns: 2000 },
    );
  });
});
