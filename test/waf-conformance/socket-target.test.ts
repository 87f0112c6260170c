/**
 * The conformance runner through the real proxy: stage bytes on a raw socket, rule ids from what
 * the proxy's WAF recorded, status from the proxy's answer; with our engine (the product's
 * default) and with ModSecurity (when its addon is built).
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { SocketTarget } from './socket-target.ts';
import { formatReport, givenSuite, loadFtwTests, runSuite, skipWithoutSuite } from '@tps/waf-conformance';
import { modSecurityAddonBuilt } from '@tps/waf-modsecurity';

const target = await SocketTarget.start();
after(() => target.close());

test('a request the CRS flags reports its rule ids and the proxy status', async () => {
  const outcome = await target.send(
    Buffer.from("GET /?id=1'%20or%20'1'='1 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ModSecurity CRS 3 Tests\r\nAccept: */*\r\n\r\n"),
    { destAddr: '127.0.0.1', port: 80 },
  );
  assert.equal(outcome.status, 200, 'detection only: the request goes through');
  assert.ok(outcome.matchedRuleIds.includes(942100), JSON.stringify(outcome.matchedRuleIds));
  assert.ok(outcome.logLines.some((line) => line.includes('[id "942100"]')));
});

test('a request the proxy itself refuses has no rule ids', async () => {
  const outcome = await target.send(Buffer.from('CONNECT www.example.com HTTP/1.1\r\nHost: www.example.com\r\n\r\n'), {
    destAddr: '127.0.0.1',
    port: 80,
  });
  assert.equal(outcome.status, 400);
  assert.deepEqual(outcome.matchedRuleIds, []);
});

test('a CRS rule file of the regression suite passes through the proxy (when the suite is given)', {
  skip: skipWithoutSuite(),
}, async () => {
  const tests = loadFtwTests(join(givenSuite()!, 'REQUEST-930-APPLICATION-ATTACK-LFI'));
  const summary = await runSuite(tests, target, { concurrency: 1 });
  assert.ok(summary.run > 10);
  assert.equal(summary.failed, 0, formatReport(summary, '930'));
});

test('the socket target runs the engine it is told: ModSecurity', {
  skip: modSecurityAddonBuilt() ? false : 'the ModSecurity addon is not built (bash packages/waf-modsecurity/build.sh)',
}, async () => {
  const modsecurity = await SocketTarget.start({ engine: 'modsecurity' });
  try {
    assert.match(modsecurity.description, /modsecurity engine/);
    assert.match(target.description, /compiled engine/);
    const outcome = await modsecurity.send(
      Buffer.from("GET /?id=1'%20or%20'1'='1 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ModSecurity CRS 3 Tests\r\nAccept: */*\r\n\r\n"),
      { destAddr: '127.0.0.1', port: 80 },
    );
    assert.ok(outcome.matchedRuleIds.includes(942100), JSON.stringify(outcome.matchedRuleIds));
  } finally {
    await modsecurity.close();
  }
});
