// The conformance runner: request bytes as go-ftw builds them, the raw request parser, the judge,
// and an end-to-end run of FTW files against our engine in process.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildRequestBytes, loadFtwTests, parseFtwFile } from './ftw.ts';
import { parseRawRequest } from './raw-http.ts';
import { formatReport, judgeStage, runSuite } from './runner.ts';
import { InProcessTarget } from './target.ts';
import { givenSuite, skipWithoutSuite } from './suite.ts';

const text = (b: Buffer): string => b.toString('latin1');

test('request line, sorted headers and autocompleted Connection / Content-Length, as go-ftw', () => {
  const bytes = buildRequestBytes({
    method: 'POST',
    uri: '/login',
    headers: { 'User-Agent': 'ModSecurity CRS 3 Tests', Host: 'localhost' },
    data: 'user=a b&pass=c/d',
  });
  assert.equal(
    text(bytes),
    'POST /login HTTP/1.1\r\nConnection: close\r\nContent-Length: 19\r\nContent-Type: application/x-www-form-urlencoded\r\n' +
      'Host: localhost\r\nUser-Agent: ModSecurity CRS 3 Tests\r\n\r\nuser=a+b&pass=c%2Fd',
  );
  // Already encoded data is left alone; defaults GET / HTTP/1.1; a bodiless POST still gets Content-Length: 0.
  assert.match(text(buildRequestBytes({ method: 'POST', headers: { Host: 'x' }, data: 'a=%41+b' })), /\r\n\r\na=%41\+b$/);
  assert.equal(text(buildRequestBytes({ headers: { Host: 'x' } })), 'GET / HTTP/1.1\r\nConnection: close\r\nHost: x\r\n\r\n');
  assert.match(text(buildRequestBytes({ method: 'POST', headers: { Host: 'x' } })), /Content-Length: 0\r\n/);
  // Explicit empty version stays empty (an HTTP/0.9-style line).
  assert.match(text(buildRequestBytes({ version: '', headers: { Host: 'x' } })), /^GET \/ \r\n/);
});

test('stop_magic / autocomplete_headers: false send exactly what the test says', () => {
  const input = { method: 'POST', headers: { Host: 'x', 'Content-Length': '50' }, data: 'a b' };
  const off = text(buildRequestBytes({ ...input, stop_magic: true }));
  assert.equal(off, 'POST / HTTP/1.1\r\nContent-Length: 50\r\nHost: x\r\n\r\na b');
  assert.equal(text(buildRequestBytes({ ...input, autocomplete_headers: false })), off);
});

test('list data joins with CRLF; multipart bare LFs become CRLF without doubling', () => {
  const multipart = { method: 'POST', headers: { Host: 'x', 'Content-Type': 'multipart/form-data; boundary=b' } };
  const fromList = text(buildRequestBytes({ ...multipart, data: ['--b', 'Content-Disposition: form-data; name="a"', '', '1', '--b--'] }));
  const fromBlock = text(buildRequestBytes({ ...multipart, data: '--b\nContent-Disposition: form-data; name="a"\n\n1\n--b--' }));
  assert.equal(fromList, fromBlock);
  assert.ok(fromList.endsWith('\r\n\r\n--b\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--b--'));
  assert.ok(!fromList.includes('\r\r'));
});

test('raw and base64 requests are sent untouched', () => {
  assert.equal(
    text(buildRequestBytes({ raw_request: 'GET /a HTTP/1.0\r\n\r\n', headers: { Host: 'ignored' } })),
    'GET /a HTTP/1.0\r\n\r\n',
  );
  const encoded = Buffer.from('POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\n\xac\xed\x00', 'latin1');
  assert.deepEqual(buildRequestBytes({ encoded_request: encoded.toString('base64') }), encoded);
});

test('raw request parser: accepted requests become WAF input', () => {
  const parsed = parseRawRequest(
    Buffer.from('\r\nPOST /p?q=1 HTTP/1.1\nHost: a\nX-Dup: 1\r\nX-Dup: 2\r\nContent-Length: 3\r\n\r\nabcNEXT', 'latin1'),
  );
  assert.equal(parsed.kind, 'request');
  if (parsed.kind !== 'request') return;
  assert.equal(parsed.method, 'POST');
  assert.equal(parsed.uri, '/p?q=1');
  assert.equal(parsed.httpVersion, '1.1');
  assert.deepEqual(parsed.headers, [
    ['Host', 'a'],
    ['X-Dup', '1'],
    ['X-Dup', '2'],
    ['Content-Length', '3'],
  ]);
  assert.equal(parsed.body.toString(), 'abc');
  const chunked = parseRawRequest(
    Buffer.from('POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n'),
  );
  assert.equal(chunked.kind === 'request' && chunked.body.toString(), 'abcde');
  const connect = parseRawRequest(Buffer.from('CONNECT a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n'));
  assert.equal(connect.kind === 'request' && connect.answerStatus, 405);
});

test('raw request parser: what a front server refuses or never answers', () => {
  const status = (raw: string): number | string => {
    const r = parseRawRequest(Buffer.from(raw, 'latin1'));
    return r.kind === 'rejected' ? r.status : r.kind;
  };
  assert.equal(status('GET / HTTP/1.1\r\nConnection: close\r\n\r\n'), 400, 'no Host');
  assert.equal(status('GET / HTTP/1.1\r\nHost: \r\n\r\n'), 400, 'empty Host');
  assert.equal(status('GET / HTTP/1.1\r\nHost: a%00\r\n\r\n'), 400, 'bad Host');
  assert.equal(status('\tGET / HTTP/1.1\r\nHost: a\r\n\r\n'), 400);
  assert.equal(status('GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n'), 400);
  assert.equal(status('GET \\ HTTP/1.1\r\nHost: a\r\n\r\n'), 400);
  assert.equal(status('GET / HTTP/1.1\r\nHost: a\r\nA: b\rC: d\r\n\r\n'), 400, 'bare CR');
  assert.equal(status('GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n'), 400);
  assert.equal(status('GET / HTTP/0.9\r\nHost: a\r\n\r\n'), 400);
  assert.equal(status('CONNECT www.cnn.com HTTP/1.1\r\nHost: a\r\n\r\n'), 400);
  assert.equal(status('POST / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n'), 400);
  assert.equal(status('POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n'), 501);
  assert.equal(status('GET / \r\nHost: a\r\n\r\n'), 'error', 'HTTP/0.9: no status line');
  assert.equal(status('POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 50\r\n\r\nshort'), 'error', 'server waits for the body');
  assert.equal(status('GET / HTTP/1.1\r\nHost: a\r\n'), 'error', 'head never ends');
});

test('judging follows go-ftw', () => {
  const outcome = { status: 200, matchedRuleIds: [942100, 949110], logLines: ['[id "942100"] [msg "SQL Injection"]'] };
  assert.equal(judgeStage({ log_contains: 'id "942100"' }, outcome), null);
  assert.match(judgeStage({ no_log_contains: 'id "942100"' }, outcome) ?? '', /log contains/);
  assert.match(judgeStage({ log_contains: 'id "941100"' }, outcome) ?? '', /does not contain/);
  assert.equal(judgeStage({ log_contains: 'SQL Inj' }, outcome), null, 'other patterns are regular expressions over the log');
  assert.equal(judgeStage({ no_log_contains: 'id:942100' }, outcome), null);
  assert.equal(judgeStage({ status: [200, 403] }, outcome), null);
  assert.match(judgeStage({ status: 400 }, outcome) ?? '', /status 200/);
  const error = { error: 'no answer', matchedRuleIds: [], logLines: [] };
  assert.equal(judgeStage({ expect_error: true }, error), null);
  assert.match(judgeStage({ log_contains: 'id "1"' }, error) ?? '', /unexpected error/);
  assert.equal(judgeStage({ expect_error: true }, outcome), null, 'go-ftw: no error and nothing else to check passes');
});

let dir: string;
let target: InProcessTarget;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ftw-'));
  target = await InProcessTarget.crsRegression('compiled');
});
after(async () => {
  await target.close();
  rmSync(dir, { recursive: true, force: true });
});

test('an FTW file runs end to end against the in-process engine', async () => {
  const file = join(dir, 'sample.yaml');
  writeFileSync(
    file,
    `---
meta: {author: test, enabled: true, name: sample.yaml, description: sample}
tests:
  - test_title: sqli-1
    stages:
      - stage:
          input: {dest_addr: 127.0.0.1, port: 80, uri: "/?id=1'%20OR%20'1'='1", headers: {Host: localhost, User-Agent: "ModSecurity CRS 3 Tests", Accept: "*/*"}}
          output: {log_contains: 'id "942100"'}
  - test_title: benign-1
    stages:
      - stage:
          input: {dest_addr: 127.0.0.1, port: 80, uri: "/index.html", headers: {Host: localhost, User-Agent: "ModSecurity CRS 3 Tests", Accept: "*/*"}}
          output: {no_log_contains: 'id "942100"'}
  - test_title: two-stages-1
    stages:
      - stage:
          input: {dest_addr: 127.0.0.1, port: 80, method: TEST, headers: {Host: localhost, User-Agent: "ModSecurity CRS 3 Tests", Accept: "*/*"}}
          output: {log_contains: 'id "911100"'}
      - stage:
          input: {dest_addr: 127.0.0.1, port: 80, headers: {Host: localhost, User-Agent: "ModSecurity CRS 3 Tests", Accept: "*/*"}}
          output: {log_contains: 'id "911100"'}
  - test_title: disabled-1
    enabled: false
    stages:
      - stage:
          input: {headers: {Host: localhost}}
          output: {status: 200}
`,
  );
  assert.equal(parseFtwFile(file).length, 4);
  const summary = await runSuite(loadFtwTests(dir), target, { concurrency: 2 });
  const byTitle = new Map(summary.results.map((r) => [r.test.title, r]));
  assert.equal(byTitle.get('sqli-1')?.status, 'passed', byTitle.get('sqli-1')?.reason);
  assert.equal(byTitle.get('benign-1')?.status, 'passed', byTitle.get('benign-1')?.reason);
  assert.equal(byTitle.get('two-stages-1')?.status, 'failed');
  assert.match(byTitle.get('two-stages-1')?.reason ?? '', /^stage 2: log does not contain/);
  assert.equal(byTitle.get('disabled-1')?.status, 'skipped');
  assert.deepEqual([summary.passed, summary.failed, summary.skipped, summary.run], [2, 1, 1, 3]);
  assert.match(formatReport(summary, 'sample'), /passed 2, failed 1, skipped 1[\s\S]*two-stages-1: stage 2/);
});

test('a CRS rule file of the regression suite passes (when the suite is given)', { skip: skipWithoutSuite() }, async () => {
  const tests = loadFtwTests(join(givenSuite()!, 'REQUEST-930-APPLICATION-ATTACK-LFI'));
  const summary = await runSuite(tests, target, { concurrency: 2 });
  assert.ok(summary.run > 10);
  assert.equal(summary.failed, 0, formatReport(summary, '930'));
});
