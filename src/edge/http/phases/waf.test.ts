/**
 * The WAF slot over real sockets, with a stand-in hook (the engine itself lives in src/edge/http/waf/):
 * what the hook sees, a block with the page and its support id, a logged match recorded as a
 * WAF_EVENT with the final status, a body longer than the WAF looks at refused (REJECT) or sent on
 * whole after its first part was inspected (PROCESS_PARTIAL, with bodyTruncated), one it read whole
 * sent on with its own length, the response side replacing a response before it is sent, a hook
 * that gives no verdict following the proxy's failMode, and the exchange of a request whose client
 * left ended with it; a client whose requests keep running past the inspection budget refused early
 * (429, one WAF_EVENT per episode, counted), and a response whose exchange is gone following failMode.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Readable } from 'node:stream';
import type { WafEvent } from '@tps/model';
import { HttpProxy } from '../http-proxy.ts';
import { request } from '../../../../test/support/http-client.ts';
import {
  FRONT_IP,
  freePort,
  resolvedProxy,
  startOrigin,
  testDeps,
  type EchoReply,
  type TestOrigin,
} from '../../../../test/support/http-servers.ts';
import net from 'node:net';
import type { HttpProxyDeps } from '../types.ts';
import type { WafHook, WafRequestInput, WafResponseInput, WafSettings, WafVerdict } from '../waf/types.ts';
import { BODY_LIMIT_RULE_ID, BUDGET_OFFENDER_RULE_ID } from './waf-request.ts';
import { WafBudgetExceededError, WafOverloadedError, WafUnavailableError } from '@tps/waf';

const RULE = {
  modSecId: 942100,
  name: 'SQL Injection Attack Detected via libinjection',
  matchedData: { status: 'DISABLED' as const, value: null },
};

describe('waf phase (hook slot)', () => {
  let origin: TestOrigin;
  let proxy: HttpProxy;
  let url = '';
  const seen: WafRequestInput[] = [];
  const responses: WafResponseInput[] = [];
  const waf: WafHook = {
    requestBodyLimit: 16,
    responseBodyLimit: 1024,
    async inspectRequest(input) {
      seen.push(input);
      const text = `${input.url} ${input.body?.toString() ?? ''}`;
      if (text.includes('attack')) return { action: 'block', event: { action: 'BLOCKED', rules: [RULE] } };
      if (text.includes('suspicious')) return { action: 'continue', event: { action: 'LOGGED', rules: [RULE] } };
      return { action: 'continue' };
    },
    inspectResponse(input) {
      responses.push(input);
      return input.body?.toString().includes('leak')
        ? { action: 'block', event: { action: 'BLOCKED', rules: [RULE] } }
        : { action: 'continue' };
    },
  };
  const deps = testDeps({ waf });

  before(async () => {
    origin = await startOrigin();
    const port = await freePort(FRONT_IP);
    proxy = new HttpProxy(resolvedProxy(port, [origin]), deps);
    await proxy.start();
    url = `http://${FRONT_IP}:${port}`;
  });
  after(async () => {
    await proxy.stop();
    await origin.close();
  });

  it('blocks with 403 and the page; the WAF_EVENT carries the same support id', { timeout: 20_000 }, async () => {
    const before = origin.requests;
    const res = await request(`${url}/search?q=attack`);
    assert.equal(res.status, 403);
    const supportId = /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(res.text)?.[1];
    assert.equal(origin.requests, before);
    await new Promise((r) => setTimeout(r, 50));
    const event = deps.insight.events.find((e): e is WafEvent => e.type === 'WAF_EVENT' && e.supportId === supportId);
    assert.ok(event);
    assert.equal(event.action, 'BLOCKED');
    assert.equal(event.request.statusCode, 403);
    assert.deepEqual(event.rules, [RULE]);
    assert.equal(seen.at(-1)!.supportId, supportId);
  });

  it('logs a match and lets the request through; the event has the status the client got', { timeout: 20_000 }, async () => {
    const res = await request(`${url}/suspicious`);
    assert.equal(res.status, 200);
    await new Promise((r) => setTimeout(r, 50));
    const event = deps.insight.events.find((e): e is WafEvent => e.type === 'WAF_EVENT' && e.action === 'LOGGED');
    assert.ok(event);
    assert.equal(event.request.statusCode, 200);
    assert.equal(event.request.path, '/suspicious');
  });

  it('refuses a body longer than the limit with 413 and a WAF_EVENT naming the limit; the origin never sees it', {
    timeout: 20_000,
  }, async () => {
    const before = origin.requests;
    const asked = seen.length;
    const declared = await request(`${url}/upload`, { method: 'POST', body: `${'x'.repeat(17)}attack` });
    const chunked = await request(`${url}/upload`, {
      method: 'POST',
      body: Readable.from([Buffer.from('x'.repeat(10)), Buffer.from('y'.repeat(10))]),
    });
    for (const res of [declared, chunked]) {
      assert.equal(res.status, 413);
      assert.equal(res.headers.connection, 'close');
      assert.match(res.text, /Support ID: <code>[0-9a-f]{32}<\/code>/);
    }
    assert.equal(origin.requests, before);
    assert.equal(seen.length, asked, 'the hook is not asked about a body it would see only in part');
    await new Promise((r) => setTimeout(r, 50));
    const supportId = /Support ID: <code>([0-9a-f]{32})/.exec(declared.text)![1];
    const event = deps.insight.events.find((e): e is WafEvent => e.type === 'WAF_EVENT' && e.supportId === supportId)!;
    assert.equal(event.action, 'BLOCKED');
    assert.equal(event.request.statusCode, 413);
    assert.equal(event.rules[0]!.modSecId, BODY_LIMIT_RULE_ID);
    assert.equal(event.bodyTruncated, undefined);
  });

  it('takes a body exactly at the limit whole', { timeout: 20_000 }, async () => {
    const res = await request(`${url}/upload`, { method: 'POST', body: 'x'.repeat(16) });
    assert.equal(res.status, 200);
    assert.equal(seen.at(-1)!.body?.length, 16);
    assert.equal(seen.at(-1)!.bodyTruncated, false);
  });

  it('sends the rest on after the first part when the proxy opts into PROCESS_PARTIAL, and the event says bodyTruncated', {
    timeout: 20_000,
  }, async () => {
    const partial = await extraProxy({ bodyLimitAction: 'PROCESS_PARTIAL' });
    try {
      const body = `${'x'.repeat(100_000)}attack`;
      const res = await request(`${partial.url}/upload`, { method: 'POST', body });
      assert.equal(res.status, 200, 'the attack is past what the WAF looks at');
      const input = seen.at(-1)!;
      assert.equal(input.body?.length, 16);
      assert.equal(input.bodyTruncated, true);
      const echo = JSON.parse(res.text) as EchoReply;
      assert.equal(echo.bodyLength, body.length);
      assert.equal(echo.bodySha256, createHash('sha256').update(body).digest('hex'));
      await new Promise((r) => setTimeout(r, 50));
      const event = partial.deps.insight.events.find((e): e is WafEvent => e.type === 'WAF_EVENT')!;
      assert.equal(event.action, 'LOGGED');
      assert.equal(event.bodyTruncated, true);
      assert.equal(event.rules[0]!.modSecId, BODY_LIMIT_RULE_ID);
      // A proxy's own limit wins over the hook's default.
      const larger = await extraProxy({ requestBodyLimit: 200_000 });
      try {
        assert.equal((await request(`${larger.url}/upload`, { method: 'POST', body })).status, 403, 'seen whole, the attack is blocked');
      } finally {
        await larger.stop();
      }
    } finally {
      await partial.stop();
    }
  });

  it('lets a multipart/form-data upload be as long as the multipart limit', { timeout: 20_000 }, async () => {
    const upload = await extraProxy({}, { ...waf, multipartBodyLimit: 128 });
    try {
      const form = (size: number) =>
        `--b\r\nContent-Disposition: form-data; name="f"; filename="a"\r\n\r\n${'z'.repeat(size)}\r\n--b--\r\n`;
      const headers = { 'content-type': 'multipart/form-data; boundary=b' };
      const fits = await request(`${upload.url}/upload`, { method: 'POST', headers, body: form(8) });
      assert.equal(fits.status, 200);
      assert.equal(seen.at(-1)!.bodyTruncated, false);
      assert.equal((await request(`${upload.url}/upload`, { method: 'POST', headers, body: form(200) })).status, 413);
      assert.equal(
        (await request(`${upload.url}/upload`, { method: 'POST', body: form(8) })).status,
        413,
        'not multipart: the plain limit',
      );
    } finally {
      await upload.stop();
    }
  });

  it('sends a body it read whole to the origin with the length it read, however the client framed it', { timeout: 20_000 }, async () => {
    const body = 'a=1&b=2&c=3';
    const chunked = await request(`${url}/form`, { method: 'POST', body: Readable.from([Buffer.from('a=1&'), Buffer.from('b=2&c=3')]) });
    const sized = await request(`${url}/form`, { method: 'POST', body });
    for (const res of [chunked, sized]) {
      assert.equal(res.status, 200);
      assert.equal(seen.at(-1)!.bodyTruncated, false);
      const echo = JSON.parse(res.text) as EchoReply;
      assert.equal(echo.headers['content-length'], String(body.length));
      assert.equal(echo.headers['transfer-encoding'], undefined);
      assert.equal(echo.bodySha256, createHash('sha256').update(body).digest('hex'));
    }
  });

  it('lets the response side replace a response before it is sent', { timeout: 20_000 }, async () => {
    const res = await request(`${url}/leak`);
    assert.equal(res.status, 403);
    assert.match(res.text, /Request blocked/);
    const input = responses.at(-1)!;
    assert.equal(input.statusCode, 200);
    assert.match(input.body?.toString() ?? '', /"url":"\/leak"/);
    assert.equal((await request(`${url}/fine`)).status, 200);
  });

  it('answers 503 with the page and counts it when the hook gives no verdict (failMode CLOSED, the default)', {
    timeout: 20_000,
  }, async () => {
    const failures: string[] = [];
    const failing = await extraProxy(
      {},
      { ...waf, inspectRequest: () => Promise.reject(new WafOverloadedError('queue full')) },
      {
        metrics: { wafUninspected: (_proxy, side, reason, outcome) => failures.push(`${side} ${reason} ${outcome}`) },
      },
    );
    try {
      const before = origin.requests;
      const res = await request(`${failing.url}/search?q=anything`);
      assert.equal(res.status, 503);
      assert.match(res.text, /Support ID: <code>[0-9a-f]{32}<\/code>/);
      assert.equal(res.headers['retry-after'], '5');
      assert.equal(origin.requests, before);
      assert.deepEqual(failures, ['request overloaded refused']);
    } finally {
      await failing.stop();
    }
  });

  it('lets the request through uninspected and counts it with failMode OPEN; a thrown error too', { timeout: 20_000 }, async () => {
    const failures: string[] = [];
    let calls = 0;
    const failing = await extraProxy(
      { failMode: 'OPEN' },
      {
        ...waf,
        inspectRequest: () => {
          if (++calls === 1) throw new Error('engine bug');
          return Promise.reject(new WafUnavailableError('worker died'));
        },
      },
      { metrics: { wafUninspected: (_proxy, side, reason, outcome) => failures.push(`${side} ${reason} ${outcome}`) } },
    );
    try {
      const before = origin.requests;
      assert.equal((await request(`${failing.url}/a?q=attack`)).status, 200);
      assert.equal((await request(`${failing.url}/b?q=attack`)).status, 200);
      assert.equal(origin.requests, before + 2);
      assert.deepEqual(failures, ['request error passed', 'request unavailable passed']);
    } finally {
      await failing.stop();
    }
  });

  it('replaces the response with 503 when the response side gives no verdict (failMode CLOSED)', { timeout: 20_000 }, async () => {
    const failing = await extraProxy({}, { ...waf, inspectResponse: () => Promise.reject(new WafUnavailableError('worker died')) });
    try {
      const res = await request(`${failing.url}/fine`);
      assert.equal(res.status, 503);
      assert.doesNotMatch(res.text, /"url"/, 'nothing of the origin response went out');
    } finally {
      await failing.stop();
    }
  });

  it('ends the exchange of a request whose client left while the WAF was at work, and sends nothing on', { timeout: 20_000 }, async () => {
    const ended: string[] = [];
    let release: (verdict: WafVerdict) => void = () => {};
    const slow = await extraProxy(
      {},
      {
        ...waf,
        inspectRequest: () => new Promise<WafVerdict>((resolve) => (release = resolve)),
        endExchange: (supportId) => ended.push(supportId),
      },
    );
    try {
      const before = origin.requests;
      const socket = net.connect({ host: FRONT_IP, port: slow.port });
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      socket.write('GET /slow HTTP/1.1\r\nHost: shop.test\r\n\r\n');
      await new Promise((r) => setTimeout(r, 100));
      socket.destroy();
      await new Promise((r) => setTimeout(r, 100));
      release({ action: 'continue' });
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(ended.length, 1, 'ended once the verdict came');
      assert.equal(origin.requests, before, 'a request whose client left is not sent on');
    } finally {
      await slow.stop();
    }
  });

  it('refuses a client early (429, uninspected, counted, one event per episode) after 3 budget overruns', { timeout: 20_000 }, async () => {
    const failures: string[] = [];
    let refusedCount = 0;
    let inspected = 0;
    const overrunning = await extraProxy(
      {},
      {
        ...waf,
        inspectRequest: () => {
          inspected++;
          // Both spellings of an overrun: the engine ended the transaction, or the pool's watchdog the thread.
          return Promise.reject(
            inspected % 2 === 1 ? new WafBudgetExceededError('budget') : new WafUnavailableError('WAF request exceeded its 250 ms budget'),
          );
        },
      },
      {
        metrics: {
          wafUninspected: (_proxy, side, reason, outcome) => failures.push(`${side} ${reason} ${outcome}`),
          wafBudgetOffenderRefused: () => refusedCount++,
        },
      },
    );
    try {
      const before = origin.requests;
      for (let i = 0; i < 3; i++) {
        const res = await request(`${overrunning.url}/slow`, { method: 'POST', body: 'a=1' });
        assert.equal(res.status, 503, 'an overrun gets failMode CLOSED');
      }
      assert.deepEqual(failures, ['request budget refused', 'request budget refused', 'request budget refused']);
      const refused = await request(`${overrunning.url}/slow`, { method: 'POST', body: 'a=1' });
      assert.equal(refused.status, 429);
      assert.equal(refused.headers['retry-after'], '60');
      const supportId = /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(refused.text)?.[1];
      assert.ok(supportId);
      const again = await request(`${overrunning.url}/other`);
      assert.equal(again.status, 429);
      assert.equal(/Support ID: <code>([0-9a-f]{32})<\/code>/.exec(again.text)?.[1], supportId, 'the episode has one support id');
      assert.equal(inspected, 3, 'refused without being inspected');
      assert.equal(origin.requests, before);
      assert.equal(refusedCount, 2);
      await new Promise((r) => setTimeout(r, 50));
      const events = overrunning.deps.insight.events.filter(
        (e): e is WafEvent => e.type === 'WAF_EVENT' && e.rules.some((rule) => rule.modSecId === BUDGET_OFFENDER_RULE_ID),
      );
      assert.equal(events.length, 1, 'one event per episode');
      assert.equal(events[0]!.supportId, supportId);
      assert.equal(events[0]!.action, 'BLOCKED');
      assert.equal(events[0]!.request.statusCode, 429);
    } finally {
      await overrunning.stop();
    }
  });

  it('never refuses early when the operator sets 0 overruns', { timeout: 20_000 }, async () => {
    const overrunning = await extraProxy(
      {},
      { ...waf, inspectRequest: () => Promise.reject(new WafBudgetExceededError('budget')) },
      { wafBudgetOffenders: { overruns: 0 } },
    );
    try {
      for (let i = 0; i < 5; i++) assert.equal((await request(`${overrunning.url}/slow`)).status, 503);
    } finally {
      await overrunning.stop();
    }
  });

  it('applies failMode to a response whose exchange is gone: CLOSED replaces it, OPEN sends it on; counted', {
    timeout: 20_000,
  }, async () => {
    for (const failMode of ['CLOSED', 'OPEN'] as const) {
      const failures: string[] = [];
      const lost = await extraProxy(
        { failMode },
        {
          ...waf,
          inspectResponse: () => Promise.reject(new WafUnavailableError('the WAF transaction of this request ended before its response')),
        },
        { metrics: { wafUninspected: (_proxy, side, reason, outcome) => failures.push(`${side} ${reason} ${outcome}`) } },
      );
      try {
        const res = await request(`${lost.url}/fine`);
        if (failMode === 'CLOSED') {
          assert.equal(res.status, 503);
          assert.doesNotMatch(res.text, /"url"/, 'nothing of the origin response went out');
          assert.deepEqual(failures, ['response unavailable refused']);
        } else {
          assert.equal(res.status, 200);
          assert.match(res.text, /"url":"\/fine"/);
          assert.deepEqual(failures, ['response unavailable passed']);
        }
      } finally {
        await lost.stop();
      }
    }
  });

  async function extraProxy(
    settings: Partial<WafSettings>,
    hook: WafHook = waf,
    more: Partial<HttpProxyDeps> = {},
  ): Promise<{ url: string; port: number; deps: ReturnType<typeof testDeps>; stop(): Promise<void> }> {
    const port = await freePort(FRONT_IP);
    const extraDeps = testDeps({ waf: hook, ...more });
    const config = resolvedProxy(port, [origin]);
    const attributes = { ...config.attributes, waf: { ...config.attributes.waf!, ...settings } };
    const extra = new HttpProxy({ ...config, attributes }, extraDeps);
    await extra.start();
    return { url: `http://${FRONT_IP}:${port}`, port, deps: extraDeps, stop: () => extra.stop() };
  }
});
