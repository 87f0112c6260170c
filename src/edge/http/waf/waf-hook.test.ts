/**
 * The bridge from the proxy's WAF phase to an engine: verdicts become block / continue with the
 * spec's WAF_EVENT rules, the body-limit defaults it hands the proxies, and exchanges that end
 * with their request (response side, or the request over first) rather than by the TTL.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createWafHook } from './waf-hook.ts';
import type { WafEngine, WafRequest, WafEngineVerdict } from '@tps/waf';
import type { WafRequestInput } from './types.ts';

/** An engine that interrupts requests whose body contains "attack", and remembers what it saw. */
function fakeEngine(seen: WafRequest[]): WafEngine {
  return {
    name: 'fake',
    async inspectRequest(request): Promise<WafEngineVerdict> {
      seen.push(request);
      const attack = Buffer.from(request.body ?? [])
        .toString()
        .includes('attack');
      return attack
        ? {
            matchedRules: [
              {
                id: 942100,
                message: 'SQL Injection Attack Detected via libinjection',
                matchedData: "1' or 1=1",
                matchedVariable: 'ARGS:q',
                severity: 2,
                tags: [],
                phase: 2,
              },
            ],
            interrupt: { status: 403 },
          }
        : { matchedRules: [] };
    },
    async close() {},
  };
}

function input(body: string, settings: Partial<WafRequestInput['settings']> = {}, bodyTruncated = false): WafRequestInput {
  return {
    proxyId: 'p',
    tenantId: 't',
    settings: { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [], ...settings },
    supportId: '0123456789abcdef0123456789abcdef',
    client: { ip: '127.0.0.1', port: 40000 },
    server: { ip: '127.0.0.2', port: 80 },
    method: 'POST',
    path: '/',
    url: '/form',
    httpVersion: '1.1',
    headers: ['host', 'x', 'content-type', 'application/x-www-form-urlencoded'],
    body: Buffer.from(body),
    bodyTruncated,
  };
}

describe('WAF hook', () => {
  it('blocks what the engine interrupts in BLOCKING mode, with the rules of a WAF_EVENT (matched data off)', async () => {
    const hook = createWafHook(fakeEngine([]));
    const verdict = await hook.inspectRequest(input('q=attack'));
    assert.deepEqual(verdict, {
      action: 'block',
      status: 403,
      event: {
        action: 'BLOCKED',
        rules: [
          {
            modSecId: 942100,
            name: 'SQL Injection Attack Detected via libinjection',
            matchedData: { status: 'DISABLED', value: null },
            matchedVariable: 'ARGS:q',
          },
        ],
      },
    });
  });

  it('lets it through and logs it in LOGGING mode, with the matched data when asked', async () => {
    const hook = createWafHook(fakeEngine([]));
    const verdict = await hook.inspectRequest(input('q=attack', { mode: 'LOGGING', logMatchedData: true }));
    assert.equal(verdict.action, 'continue');
    assert.equal(verdict.event?.action, 'LOGGED');
    assert.deepEqual(verdict.event?.rules[0]?.matchedData, { status: 'ENABLED', value: "1' or 1=1" });
  });

  it('hands the proxies ModSecurity-style defaults: REJECT, a multipart limit never below the body limit', () => {
    const hook = createWafHook(fakeEngine([]));
    assert.equal(hook.requestBodyLimit, 128 * 1024);
    assert.equal(hook.bodyLimitAction, 'REJECT');
    assert.equal(hook.multipartBodyLimit, 1024 * 1024);
    assert.equal(createWafHook(fakeEngine([]), { requestBodyLimit: 2 * 1024 * 1024 }).multipartBodyLimit, 2 * 1024 * 1024);
  });

  it('ends an exchange with its response, or with its request when the response never comes', async () => {
    let ended = 0;
    const engine: WafEngine = {
      ...fakeEngine([]),
      async beginExchange(request) {
        return {
          requestVerdict: await fakeEngine([]).inspectRequest(request, { paranoiaLevel: 1 }),
          inspectResponse: async () => ({ matchedRules: [] }),
          end: () => void ended++,
        };
      },
    };
    const hook = createWafHook(engine);
    const first = input('q=benign');
    const second = { ...input('q=benign'), supportId: 'ffffffffffffffffffffffffffffffff' };
    await hook.inspectRequest(first);
    await hook.inspectRequest(second);
    assert.equal(hook.openExchanges, 2);
    await hook.inspectResponse({ request: first, statusCode: 200, headers: [], body: null, bodyTruncated: false });
    hook.endExchange(second.supportId);
    hook.endExchange(second.supportId);
    assert.equal(hook.openExchanges, 0);
    assert.equal(ended, 2);
    assert.deepEqual({ ...hook.exchangeCounts }, { opened: 2, inspected: 1, abandoned: 1, expired: 0 });
    // A blocked request keeps no exchange at all.
    await hook.inspectRequest(input('q=attack'));
    assert.equal(hook.openExchanges, 0);
    assert.equal(hook.exchangeCounts.opened, 2);
  });

  it('counts an exchange the TTL had to end as expired', async () => {
    const engine: WafEngine = {
      ...fakeEngine([]),
      async beginExchange(request) {
        return {
          requestVerdict: await fakeEngine([]).inspectRequest(request, { paranoiaLevel: 1 }),
          inspectResponse: async () => ({ matchedRules: [] }),
          end: () => {},
        };
      },
    };
    const hook = createWafHook(engine, { exchangeTtlMs: 5 });
    const request = input('q=benign');
    await hook.inspectRequest(request);
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(hook.openExchanges, 0);
    assert.equal(hook.exchangeCounts.expired, 1);
    // Its response has nothing left to be inspected with: the hook says so (the proxy applies failMode).
    await assert.rejects(
      Promise.resolve(hook.inspectResponse({ request, statusCode: 200, headers: [], body: null, bodyTruncated: false })),
      (error: Error & { code?: string }) => error.code === 'ERR_WAF_UNAVAILABLE',
    );
  });

  it("names the proxy's tenant in the engine's request (fair shares per tenant)", async () => {
    const seen: WafRequest[] = [];
    await createWafHook(fakeEngine(seen)).inspectRequest(input('q=1'));
    assert.equal(seen[0]!.tenant, 't');
  });

  it('lets a response through when its engine keeps no exchanges (it inspects no response)', async () => {
    const hook = createWafHook(fakeEngine([]));
    const request = input('q=1');
    await hook.inspectRequest(request);
    assert.deepEqual(await hook.inspectResponse({ request, statusCode: 200, headers: [], body: null, bodyTruncated: false }), {
      action: 'continue',
    });
  });
});
