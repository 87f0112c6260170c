import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { WafRequest } from '../engine.ts';
import { compileRuleSet } from '../seclang/compiler.ts';
import { CompiledInspector } from '../inspector.ts';

function request(uri: string): WafRequest {
  return {
    clientIp: '192.0.2.1',
    clientPort: 1234,
    serverIp: '192.0.2.2',
    serverPort: 80,
    method: 'GET',
    uri,
    httpVersion: '1.1',
    headers: [['Host', 'example.com']],
  };
}

test("logged messages: each has its own tags, static or expanded, a chain logs its members' tags", () => {
  const rules = `
SecRuleEngine On
SecDefaultAction "phase:1,log,auditlog,pass"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.app=shop"
SecRule ARGS:a "@rx x" "id:10,phase:1,pass,log,msg:'static',tag:'one',tag:'two'"
SecRule ARGS:b "@rx x" "id:11,phase:1,pass,log,msg:'macro',tag:'app/%{tx.app}',tag:'three'"
SecRule ARGS:c "@rx x" "id:12,phase:1,pass,log,msg:'chain',tag:'parent',chain"
  SecRule ARGS:c "@rx x" "tag:'child'"
SecRule ARGS:d "@rx x" "id:13,phase:1,pass,log,msg:'static again',tag:'one',tag:'two'"
`;
  const inspector = new CompiledInspector(compileRuleSet([{ text: rules, name: 'messages.conf' }]), {
    request: 1 << 20,
    response: 1 << 20,
  });
  const run = (uri: string) => inspector.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules;
  const all = run('/?a=x&b=x&c=x&d=x');
  assert.deepEqual(
    all.map((m) => [m.id, m.tags]),
    [
      [10, ['one', 'two']],
      [11, ['app/shop', 'three']],
      [12, ['child', 'parent']],
      [13, ['one', 'two']],
    ],
  );
  assert.notEqual(all[0]!.tags, all[3]!.tags, 'two messages of rules with the same tags do not share a list');
  (all[0]!.tags as string[]).push('changed');
  assert.deepEqual(run('/?a=x')[0]!.tags, ['one', 'two'], "a message's list is not the rule's");
});

test('UNIQUE_ID: the request id when given, else one made per transaction, the same at every read', () => {
  const rules = `
SecRuleEngine On
SecRule UNIQUE_ID "@rx ^(.+)$" "id:20,phase:1,pass,log,capture,msg:'first %{TX.1}'"
SecRule UNIQUE_ID "@rx ^(.+)$" "id:21,phase:1,pass,log,msg:'again %{UNIQUE_ID}'"
`;
  const inspector = new CompiledInspector(compileRuleSet([{ text: rules, name: 'unique-id.conf' }]), {
    request: 1 << 20,
    response: 1 << 20,
  });
  const messages = (id?: string) =>
    inspector
      .inspectRequest({ ...request('/'), ...(id !== undefined ? { id } : {}) }, { paranoiaLevel: 1, mode: 'LOGGING' })
      .verdict.matchedRules.map((m) => m.message);
  assert.deepEqual(messages('req-42'), ['first req-42', 'again req-42']);
  const [first, again] = messages();
  assert.match(first!, /^first [0-9a-f]{16,}$/);
  assert.equal(again, `again ${first!.slice('first '.length)}`);
  assert.notEqual(messages()[0], first, 'each transaction has its own');
});
