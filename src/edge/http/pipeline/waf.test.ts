/**
 * The WAF slot over real sockets, with a stand-in hook (the engine itself lives in src/edge/http/waf/):
 * what the hook sees, a block with the page and its support id, a logged match recorded as a
 * WAF_EVENT with the final status, a body longer than the WAF looks at still reaching the origin
 * whole, one it read whole sent on with its own length, and the response side replacing a response
 * before it is sent.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Readable } from 'node:stream';
import type { WafEvent } from '../../../insight/event.ts';
import { HttpProxy } from '../http-proxy.ts';
import { request } from '../test-support/client.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type EchoReply, type TestOrigin } from '../test-support/servers.ts';
import type { WafHook, WafRequestInput, WafResponseInput } from './waf.ts';

const RULE = { modSecId: 942100, name: 'SQL Injection Attack Detected via libinjection', matchedData: { status: 'DISABLED' as const, value: null } };

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
      return input.body?.toString().includes('leak') ? { action: 'block', event: { action: 'BLOCKED', rules: [RULE] } } : { action: 'continue' };
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

  it('shows the hook the first requestBodyLimit bytes and still sends the whole body', { timeout: 20_000 }, async () => {
    const body = 'x'.repeat(100_000) + 'attack';
    const res = await request(`${url}/upload`, { method: 'POST', body });
    assert.equal(res.status, 200, 'the attack is past what the WAF looks at');
    const input = seen.at(-1)!;
    assert.equal(input.body?.length, 16);
    assert.equal(input.bodyTruncated, true);
    const echo = JSON.parse(res.text) as EchoReply;
    assert.equal(echo.bodyLength, body.length);
    assert.equal(echo.bodySha256, createHash('sha256').update(body).digest('hex'));
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
});
