/**
 * The one-pass response head reader (response-head.ts) against the line-splitting reader it
 * replaced, kept here as the oracle: on generated heads, hostile ones most of all (obs-fold, bare
 * CR and LF, NUL and other control characters, duplicate and malformed Content-Length,
 * Transfer-Encoding variants, 1xx and 101, huge heads), both accept or refuse alike, for the same
 * reason, and read the same fields. Plus a few fixed cases, so that what the oracle says is also
 * spelled out.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { NODE_HTTP_COMMON } from '../front/node-http-common.ts';
import { emptyResponseHead, parseResponseHead, type ResponseHead } from './response-head.ts';

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The origin client's head reader before response-head.ts, as a function: the oracle. */
function oracle(head: string): ResponseHead | string {
  const lines = head.split('\r\n');
  const status = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: [^\r\n]*)?$/.exec(lines[0]!);
  if (status === null) return 'bad status line';
  const http10 = status[1] === '0';
  const code = Number(status[2]);
  const raw: string[] = [];
  let length = -1;
  let chunked = false;
  let transferEncoding = false;
  let close = http10;
  let keepAlive = -1;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    if (colon <= 0 || line.indexOf('\n') !== -1 || line.indexOf('\r') !== -1) return 'bad header line';
    const name = line.slice(0, colon);
    if (!TOKEN.test(name)) return 'bad header name';
    let start = colon + 1;
    let end = line.length;
    while (start < end && (line.charCodeAt(start) === 32 || line.charCodeAt(start) === 9)) start++;
    while (end > start && (line.charCodeAt(end - 1) === 32 || line.charCodeAt(end - 1) === 9)) end--;
    const value = line.slice(start, end);
    raw.push(name, value);
    switch (name.length) {
      case 10:
        if (name.toLowerCase() === 'connection') {
          const v = value.toLowerCase();
          if (v.includes('close')) close = true;
          else if (http10 && v.includes('keep-alive')) close = false;
        } else if (name.toLowerCase() === 'keep-alive') {
          const hint = /timeout=(\d+)/i.exec(value);
          if (hint) keepAlive = Number(hint[1]);
        }
        break;
      case 14:
        if (name.toLowerCase() === 'content-length') {
          if (!/^\d{1,15}$/.test(value)) return 'bad content-length';
          const n = Number(value);
          if (length !== -1 && length !== n) return 'conflicting content-length';
          length = n;
        }
        break;
      case 17:
        if (name.toLowerCase() === 'transfer-encoding') {
          transferEncoding = true;
          chunked = /(?:^|,)\s*chunked\s*$/i.test(value);
        }
        break;
    }
  }
  if (transferEncoding && length !== -1) return 'both Transfer-Encoding and Content-Length';
  if (code === 101) return 'unexpected protocol switch';
  return {
    status: code,
    http10,
    headers: raw,
    contentLength: length,
    transferEncoding,
    chunked,
    close,
    keepAliveTimeoutSeconds: keepAlive,
  };
}

/** As the origin client calls it: the head, its CRLF CRLF, and the start of a body. */
function parsed(head: string): ResponseHead | string {
  const into = emptyResponseHead();
  return parseResponseHead(`${head}\r\n\r\nbody: x\r\n`, head.length, into) ?? into;
}

/** What the origin client hands the reader: the bytes before the first CRLF CRLF. */
function cut(bytes: string): string {
  const end = bytes.indexOf('\r\n\r\n');
  return end === -1 ? bytes : bytes.slice(0, end);
}

const pick = <T>(...values: T[]): fc.Arbitrary<T> => fc.constantFrom(...values);
/** Characters that matter to the reader, and some that do not. */
const nasty = fc.oneof(
  { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 3, unit: 'grapheme-ascii' }) },
  pick('\r', '\n', '\r\n', '\0', '\x01', '\x7f', '\t', ' ', ':', ',', ';', '=', '\xff', 'a', 'Z', '0', '9', '-'),
);
const noise = fc.array(fc.oneof(nasty, fc.string({ maxLength: 4 })), { maxLength: 8 }).map((parts) => parts.join(''));
const caseOf = (name: string): fc.Arbitrary<string> =>
  fc
    .array(fc.boolean(), { minLength: name.length, maxLength: name.length })
    .map((upper) => [...name].map((c, i) => (upper[i] ? c.toUpperCase() : c)).join(''));
const space = pick('', ' ', '\t', '  ', ' \t');

const statusLine = fc
  .oneof(
    { weight: 6, arbitrary: fc.tuple(pick('0', '1'), fc.integer({ min: 100, max: 599 }), pick('', ' OK', ' ', ' Not Found', ' \x01x')) },
    {
      weight: 1,
      arbitrary: fc.tuple(
        pick('0', '1', '2', '9', 'x', ''),
        pick(0, 1, 99, 100, 101, 199, 999, 1000, 2000),
        pick(' OK', 'OK', '\r', '\n', '\rx', ' a\nb'),
      ),
    },
  )
  .map(([minor, code, reason]) => `HTTP/1.${minor} ${code}${reason}`);
const rawStatusLine = fc.oneof(
  { weight: 12, arbitrary: statusLine },
  {
    weight: 1,
    arbitrary: pick(
      'HTTP/1.1 200',
      'HTTP/1.1 200 ',
      'http/1.1 200 OK',
      'HTTP/2 200',
      'HTTP/1.1  200 OK',
      'HTTP/1.1 20',
      'HTTP/1.1 0200',
      ' HTTP/1.1 200 OK',
      '',
    ),
  },
  { weight: 1, arbitrary: noise },
);

const framingValue = fc.oneof(
  pick('0', '57', '057', '1', '999999999999999', '1000000000000000', '', '-1', '+5', '5 ', ' 5', '5,5', '0x10', '5\0', '١'),
  fc.nat().map(String),
);
const codingValue = pick(
  'chunked',
  'CHUNKED',
  'gzip, chunked',
  'chunked, gzip',
  'gzip',
  'chunked ',
  ' chunked',
  ',chunked',
  'xchunked',
  'chunked;q=1',
  'identity',
  '',
  'gzip,\tchunked',
);
const connectionValue = pick('close', 'keep-alive', 'Close', 'KEEP-ALIVE', 'upgrade', 'keep-alive, close', 'x-foo', 'closed', '');
const keepAliveValue = pick(
  'timeout=5',
  'TIMEOUT=30, max=100',
  'timeout=',
  'max=5',
  'timeout=0',
  'xtimeout=7',
  'timeout=abc, timeout=9',
  'timeout=99999999999999999999',
);

const field = fc.oneof(
  { weight: 3, arbitrary: fc.tuple(caseOf('content-length'), space, framingValue, space).map(([n, a, v, b]) => `${n}:${a}${v}${b}`) },
  { weight: 2, arbitrary: fc.tuple(caseOf('transfer-encoding'), space, codingValue, space).map(([n, a, v, b]) => `${n}:${a}${v}${b}`) },
  { weight: 2, arbitrary: fc.tuple(caseOf('connection'), space, connectionValue).map(([n, a, v]) => `${n}:${a}${v}`) },
  { weight: 1, arbitrary: fc.tuple(caseOf('keep-alive'), space, keepAliveValue).map(([n, a, v]) => `${n}:${a}${v}`) },
  {
    weight: 8,
    arbitrary: fc
      .tuple(pick('Server', 'Date', 'Content-Type', 'X-A', 'set-cookie', 'etag'), space, noise)
      .map(([n, a, v]) => `${n}:${a}${v}`),
  },
  // obs-fold, empty and odd names, no colon, a colon first, bare line breaks, NUL and friends.
  { weight: 1, arbitrary: fc.tuple(pick(' ', '\t'), noise).map(([lead, rest]) => `${lead}${rest}`) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(pick('X Y', 'X\0', '', 'Content-Length ', 'a\rb', 'a\nb', 'ä', 'X-(', 'x'), pick(':', '', ': ', '::'), noise)
      .map(([n, c, v]) => `${n}${c}${v}`),
  },
  { weight: 1, arbitrary: noise },
);
const lineEnd = fc.oneof({ weight: 30, arbitrary: fc.constant('\r\n') }, pick('\n', '\r', '\r\r\n', '\n\r'));

/** Lines joined by CRLF, or now and then by a bare LF or CR; cut as the client cuts it. */
const head = fc
  .tuple(rawStatusLine, fc.array(fc.tuple(field, lineEnd), { maxLength: 12 }))
  .map(([status, fields]) => cut(`${status}${fields.map(([line, eol]) => `${eol}${line}`).join('')}\r\n\r\n`));

describe('parseResponseHead', () => {
  it('agrees with the line-splitting reader on generated heads (accept/refuse, reason, fields)', () => {
    fc.assert(
      fc.property(head, (text) => {
        assert.deepEqual(parsed(text), oracle(text));
      }),
      { numRuns: 20_000 },
    );
  });

  it('agrees on arbitrary strings of the characters that matter', () => {
    fc.assert(
      fc.property(
        fc.tuple(pick('HTTP/1.1 200 OK\r\n', 'HTTP/1.0 204\r\n', 'HTTP/1.1 103 Early\r\n', ''), fc.array(nasty, { maxLength: 60 })),
        ([prefix, chars]) => {
          const text = cut(prefix + chars.join(''));
          assert.deepEqual(parsed(text), oracle(text));
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it('agrees on huge heads', () => {
    const many = (n: number, line: string): string => `HTTP/1.1 200 OK${`\r\n${line}`.repeat(n)}`;
    for (const text of [
      many(2000, 'X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'),
      many(2000, 'Content-Length: 5'),
      `${many(2000, 'X: y')}\r\n obs-fold`,
      `${many(2000, 'X: y')}\r\nX: bare\nLF`,
      `HTTP/1.1 200 ${'r'.repeat(100_000)}`,
      `HTTP/1.1 200 OK\r\nX: ${'v'.repeat(100_000)}\0`,
    ]) {
      assert.deepEqual(parsed(text), oracle(text));
    }
  });

  it("accepts as a name exactly what node:http's writeHead accepts (the front end does not check these names again)", () => {
    const isHttpToken = NODE_HTTP_COMMON!._checkIsHttpToken;
    for (let code = 0; code < 256; code++) {
      for (const name of [String.fromCharCode(code), `X${String.fromCharCode(code)}Y`]) {
        const head = `HTTP/1.1 200 OK\r\n${name}: v`;
        const into = emptyResponseHead();
        const refused = parseResponseHead(`${head}\r\n\r\n`, head.length, into);
        // Every name read is one node:http accepts; and (a colon aside, which ends the name) only those are read.
        if (refused === undefined) assert.equal(isHttpToken(into.headers[0]!), true, JSON.stringify(name));
        if (!name.includes(':')) assert.equal(refused === undefined, isHttpToken(name), JSON.stringify(name));
      }
    }
  });

  it('reads a typical head and refuses the classic smuggling shapes', () => {
    assert.deepEqual(parsed('HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length:  57 \r\nConnection: keep-alive'), {
      status: 200,
      http10: false,
      headers: ['Server', 'nginx', 'Content-Length', '57', 'Connection', 'keep-alive'],
      contentLength: 57,
      transferEncoding: false,
      chunked: false,
      close: false,
      keepAliveTimeoutSeconds: -1,
    });
    assert.equal(parsed('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6'), 'conflicting content-length');
    assert.equal(parsed('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked'), 'both Transfer-Encoding and Content-Length');
    assert.equal(parsed('HTTP/1.1 200 OK\r\nX: a\r\n folded: b'), 'bad header name');
    assert.equal(parsed('HTTP/1.1 200 OK\r\nX: a\r\n\tfolded'), 'bad header line');
    assert.equal(parsed('HTTP/1.1 200 OK\r\nX: a\nContent-Length: 0'), 'bad header line');
    assert.equal(parsed('HTTP/1.1 200 OK\r\nX\0: a'), 'bad header name');
    assert.equal(parsed('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket'), 'unexpected protocol switch');
    assert.equal(parsed('HTTP/1.1 200 OK\nX: a'), 'bad status line');
    const interim = parsed('HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload');
    assert.equal(typeof interim === 'string' ? interim : interim.status, 103);
  });
});
