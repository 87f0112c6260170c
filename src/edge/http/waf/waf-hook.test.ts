/**
 * The bridge from the proxy's WAF phase to an engine: verdicts become block / continue with the
 * spec's WAF_EVENT rules, and a request body past the limit follows the configured policy.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createWafHook } from './waf-hook.ts';
import type { WafEngine, WafRequest, WafVerdict } from './engine.ts';
import type { WafRequestInput } from '../pipeline/waf.ts';

/** An engine that interrupts requests whose body contains "attack", and remembers what it saw. */
function fakeEngine(seen: WafRequest[]): WafEngine {
  return {
    name: 'fake',
    async inspectRequest(request): Promise<WafVerdict> {
      seen.push(request);
      const attack = Buffer.from(request.body ?? []).toString().includes('attack');
      return attack
        ? {
            matchedRules: [
              { id: 942100, message: 'SQL Injection Attack Detected via libinjection', matchedData: "1' or 1=1", matchedVariable: 'ARGS:q', severity: 2, tags: [], phase: 2 },
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
    settings: { mode: 'BLOCKING', paranoiaLevel: 1, logMatchedData: false, ruleExclusions: [], ...settings },
    supportId: '0123456789abcdef0123456789abcdef',
    client: { ip: '127.0.0.1', port: 40000 },
    server: { ip: '127.0.0.2', port: 80 },
    method: 'POST',
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
        rules: [{ modSecId: 942100, name: 'SQL Injection Attack Detected via libinjection', matchedData: { status: 'DISABLED', value: null }, matchedVariable: 'ARGS:q' }],
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

  it('inspects the first part of a body past the limit by default (ProcessPartial)', async () => {
    const seen: WafRequest[] = [];
    const hook = createWafHook(fakeEngine(seen), { requestBodyLimit: 8 });
    assert.equal((await hook.inspectRequest(input('q=benign', {}, true))).action, 'continue');
    assert.equal(seen.length, 1, 'the engine saw the part within the limit');
  });

  it('refuses a body past the limit with 413 when the policy is REJECT, without asking the engine', async () => {
    const seen: WafRequest[] = [];
    const hook = createWafHook(fakeEngine(seen), { requestBodyLimit: 8, bodyLimitAction: 'REJECT' });
    assert.deepEqual(await hook.inspectRequest(input('q=benign', {}, true)), { action: 'block', status: 413 });
    assert.equal(seen.length, 0);
  });
});
