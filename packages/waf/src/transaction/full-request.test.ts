import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { WafRequest } from '../engine.ts';
import { compileCrs, CompiledInspector } from '../inspector.ts';
import { compileRuleSet } from '../seclang/compiler.ts';

const LIMITS = { request: 1 << 20, response: 1 << 20 };

function post(body: string): WafRequest {
  const bytes = Buffer.from(body);
  return {
    clientIp: '192.0.2.1',
    clientPort: 1234,
    serverIp: '192.0.2.2',
    serverPort: 80,
    method: 'POST',
    uri: '/form',
    httpVersion: '1.1',
    headers: [
      ['Host', 'example.com'],
      ['X-Marker', 'canary'],
      ['Content-Type', 'application/x-www-form-urlencoded'],
      ['Content-Length', String(bytes.length)],
    ],
    body: bytes,
  };
}

const PRELUDE = `
SecRuleEngine On
SecRequestBodyAccess On
`;

function matched(rules: string, request: WafRequest): { id: number; message: string }[] {
  const ruleSet = compileRuleSet([{ text: PRELUDE + rules, name: 'full-request.conf' }]);
  const inspector = new CompiledInspector(ruleSet, LIMITS);
  return inspector
    .inspectRequest(request, { paranoiaLevel: 1, mode: 'LOGGING' })
    .verdict.matchedRules.map((m) => ({ id: m.id, message: m.message }));
}

test('FULL_REQUEST: built for a rule set that reads it, as a variable or in a macro, and for none that does not', () => {
  const asVariable = 'SecRule FULL_REQUEST "@rx X-Marker: canary\\nContent-Type" "id:1,phase:2,pass,log,msg:\'full request\'"';
  assert.equal(compileRuleSet([{ text: PRELUDE + asVariable, name: 'a.conf' }]).readsFullRequest, true);
  assert.deepEqual(matched(asVariable, post('a=1')), [{ id: 1, message: 'full request' }]);

  const asLength = 'SecRule FULL_REQUEST_LENGTH "@gt 10" "id:2,phase:2,pass,log,msg:\'long\'"';
  assert.deepEqual(matched(asLength, post('a=1')), [{ id: 2, message: 'long' }]);

  const inMacro = 'SecRule ARGS "@streq 1" "id:3,phase:2,pass,log,msg:\'length %{full_request_length}\'"';
  assert.equal(compileRuleSet([{ text: PRELUDE + inMacro, name: 'c.conf' }]).readsFullRequest, true);
  const full = 'Host: example.com\nX-Marker: canary\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 3\n\n\na=1';
  assert.deepEqual(matched(inMacro, post('a=1')), [{ id: 3, message: `length ${full.length}` }]);

  const added = `SecRule ARGS "@rx canary" "id:4,phase:2,pass,log,msg:'added target'"
SecRuleUpdateTargetById 4 "FULL_REQUEST"`;
  assert.equal(compileRuleSet([{ text: PRELUDE + added, name: 'd.conf' }]).readsFullRequest, true);
  assert.deepEqual(matched(added, post('a=1')), [{ id: 4, message: 'added target' }]);

  const none = 'SecRule ARGS "@rx canary" "id:5,phase:2,pass,log,msg:\'args\'"';
  assert.equal(compileRuleSet([{ text: PRELUDE + none, name: 'e.conf' }]).readsFullRequest, false);
  assert.equal(compileCrs().readsFullRequest, false);
});
