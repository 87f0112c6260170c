/**
 * The access log: its lines formatted in place in the line writer's memory (byte for byte what
 * JSON.stringify writes), the lines it cannot format left out and counted, and sampling.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { LineWriter } from '../../io/line-writer.ts';
import { AccessLog } from './access-log.ts';
import type { AccessLogEntry } from './types.ts';
import { Random } from '@tps/waf-conformance';
import { appendHttpLine } from './http-line.ts';

const tempFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tps-lines-')), 'sub', 'access.log');

/** Text that JSON escapes or encodes in several bytes as often as plain text. */
function randomText(random: Random, maxLength: number): string {
  const alphabet = [
    'a',
    'Z',
    '0',
    '/',
    ' ',
    '"',
    '\\',
    '\n',
    '\u0000',
    '\u001f',
    '\u007f',
    'é',
    '€',
    '\ud83d\ude00',
    '\ud800',
    '\udfff',
    '\u2028',
  ];
  let text = '';
  const length = random.int(maxLength + 1);
  for (let i = 0; i < length; i++) text += random.chance(0.7) ? String.fromCharCode(0x20 + random.int(0x5f)) : random.pick(alphabet);
  return text;
}

function randomNumber(random: Random): number {
  switch (random.int(8)) {
    case 0:
      return random.int(70_000);
    case 1:
      return Math.round(random.next() * random.pick([1, 1000, 1e6, 1e12]) * 1000) / 1000;
    case 2:
      return -Math.round(random.next() * 1e5) / 1000;
    case 3:
      return random.pick([
        0,
        -0,
        Number.NaN,
        Number.POSITIVE_INFINITY,
        Number.NEGATIVE_INFINITY,
        Number.MAX_SAFE_INTEGER,
        -Number.MAX_SAFE_INTEGER,
        2 ** 53 + 2,
        1e21,
        1e-7,
        5e-324,
      ]);
    case 4:
      return (random.next() - 0.5) * 10 ** random.int(25);
    case 5:
      return random.int(1000) / 1000;
    case 6:
      return 8.8e12 + random.int(1000) / 1000;
    default:
      return random.next();
  }
}

/** Every key of an entry, in the order `accessLogEntry` sets them (the order JSON.stringify writes). */
function randomEntry(random: Random): AccessLogEntry {
  const text = (max = 40) => randomText(random, max);
  const maybe = <T>(value: () => T): T | undefined => (random.chance(0.5) ? value() : undefined);
  const fields: { [K in keyof Required<AccessLogEntry>]: AccessLogEntry[K] } = {
    type: 'http',
    time: text(),
    proxyId: text(),
    tenantId: text(),
    revision: randomNumber(random),
    supportId: text(),
    requestId: text(),
    clientIp: text(),
    clientPort: randomNumber(random),
    serverIp: text(),
    serverPort: randomNumber(random),
    country: text(),
    protocol: random.pick(['HTTP/1.0', 'HTTP/1.1', 'HTTP/2'] as const),
    tls: random.chance(0.5),
    method: text(),
    host: text(),
    url: text(3000),
    status: randomNumber(random),
    answeredBy: random.pick(['origin', 'waf', 'rate-limit', 'geo', 'acme', 'error', 'none'] as const),
    bytesIn: randomNumber(random),
    bytesOut: randomNumber(random),
    upstreamAttempts: randomNumber(random),
    durationMs: randomNumber(random),
    rawUrl: maybe(() => text(3000)),
    clientIpSource: maybe(() => random.pick(['proxy-protocol', 'x-forwarded-for'] as const)),
    peerIp: maybe(text),
    clientCertificate: maybe(text),
    waf: maybe(() => random.pick(['PASSED', 'BLOCKED', 'LOGGED', 'UNINSPECTED'] as const)),
    wafRules: maybe(() => Array.from({ length: random.int(4) }, () => randomNumber(random))),
    upstream: maybe(text),
    upstreamError: maybe(text),
    originMs: maybe(() => randomNumber(random)),
    sample: maybe(() => randomNumber(random)),
  };
  const entry: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) entry[key] = value;
  return entry as unknown as AccessLogEntry;
}

describe('access-log lines formatted in place', () => {
  it('are, byte for byte, what JSON.stringify writes, on random entries (pipe-sized and file-sized chunks)', async () => {
    for (const destination of ['file', 'stdout'] as const) {
      const random = new Random(destination === 'file' ? 2511 : 2512);
      const entries = Array.from({ length: 3000 }, () => randomEntry(random));
      if (destination === 'file') {
        const file = tempFile();
        // Written in one synchronous run: the buffer holds them all.
        const writer = new LineWriter(file, { maxBufferedBytes: 1 << 26 });
        for (const entry of entries) {
          assert.equal(writer.startLine(), true);
          appendHttpLine(writer, entry);
          writer.endLine();
        }
        await writer.close();
        assert.equal(fs.readFileSync(file, 'utf8'), entries.map((entry) => `${JSON.stringify(entry)}\n`).join(''));
        assert.equal(writer.written, entries.length);
      } else {
        // Standard output is a pipe here: chunks of PIPE_BUF, long lines alone.
        const script = `import { LineWriter } from ${JSON.stringify(new URL('../../io/line-writer.ts', import.meta.url).href)};
          import { appendHttpLine } from ${JSON.stringify(new URL('./http-line.ts', import.meta.url).href)};
          import fs from 'node:fs';
          const entries = JSON.parse(fs.readFileSync(0, 'utf8'));
          const writer = new LineWriter('stdout', { maxBufferedBytes: 1 << 26 });
          for (const entry of entries) { writer.startLine(); appendHttpLine(writer, entry); writer.endLine(); }
          await writer.close();`;
        // JSON carries no NaN, infinities or -0: the entries are sent as they print.
        const sent = entries.map((entry) => JSON.parse(JSON.stringify(entry)) as AccessLogEntry);
        const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
          input: JSON.stringify(sent),
          encoding: 'utf8',
          maxBuffer: 1 << 28,
        });
        assert.equal(out, sent.map((entry) => `${JSON.stringify(entry)}\n`).join(''));
      }
    }
  });

  it('writes numbers as JSON.stringify does', async () => {
    const random = new Random(77);
    const file = tempFile();
    const writer = new LineWriter(file);
    const values = Array.from({ length: 20_000 }, () => randomNumber(random));
    for (const value of values) {
      writer.startLine();
      writer.appendJsonNumber(value);
      writer.endLine();
    }
    await writer.close();
    assert.deepEqual(
      fs.readFileSync(file, 'utf8').trimEnd().split('\n'),
      values.map((value) => JSON.stringify(value)),
    );
  });

  it('leaves out a line whose formatting was left unfinished', async () => {
    const file = tempFile();
    const writer = new LineWriter(file);
    writer.startLine();
    writer.appendAscii('{"half":');
    writer.startLine();
    writer.appendJsonString('whole');
    writer.endLine();
    assert.equal(writer.write('next'), true);
    await writer.close();
    assert.equal(fs.readFileSync(file, 'utf8'), '"whole"\nnext\n');
  });
});

describe('access log', () => {
  it('leaves out, and counts, a request line it cannot format, and writes the others', async () => {
    const file = tempFile();
    const log = new AccessLog({ destination: file, sample: 1 });
    const good = randomEntry(new Random(5));
    log.http({ ...good, url: undefined as unknown as string });
    log.http(good);
    await log.close();
    assert.equal(fs.readFileSync(file, 'utf8'), `${JSON.stringify(good)}\n`);
    assert.deepEqual(log.counts, { written: 1, dropped: 1, sampled: 0 });
  });
});

describe('access log sampling', () => {
  const entry = (answeredBy: AccessLogEntry['answeredBy'], status: number): AccessLogEntry => ({
    type: 'http',
    time: '2026-01-01T00:00:00.000Z',
    proxyId: 'p',
    tenantId: 't',
    revision: 1,
    supportId: 's',
    requestId: 's',
    clientIp: '192.0.2.1',
    clientPort: 1,
    serverIp: '192.0.2.2',
    serverPort: 80,
    country: 'ZZ',
    protocol: 'HTTP/1.1',
    tls: false,
    method: 'GET',
    host: 'h',
    url: '/',
    status,
    answeredBy,
    bytesIn: 0,
    bytesOut: 0,
    upstreamAttempts: 1,
    durationMs: 1,
  });

  it('writes every request the origin did not answer with 1xx-3xx, and one in N of the others, marked', async () => {
    const file = tempFile();
    const log = new AccessLog({ destination: file, sample: 10 });
    for (let i = 0; i < 2000; i++) log.http(entry('origin', 200));
    for (let i = 0; i < 50; i++) log.http(entry('waf', 403));
    for (let i = 0; i < 50; i++) log.http(entry('origin', 500));
    await log.close();
    const lines = fs
      .readFileSync(file, 'utf8')
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line) as AccessLogEntry);
    const normal = lines.filter((line) => line.status === 200);
    assert.equal(lines.filter((line) => line.status !== 200).length, 100);
    assert.ok(normal.every((line) => line.sample === 10));
    assert.ok(lines.filter((line) => line.status !== 200).every((line) => line.sample === undefined));
    // One in ten of 2,000, at random: far from 0 and from 2,000.
    assert.ok(normal.length > 100 && normal.length < 320, String(normal.length));
    assert.equal(log.counts.sampled + normal.length, 2000);
  });
});
