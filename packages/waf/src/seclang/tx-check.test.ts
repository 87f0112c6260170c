import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { WafRequest } from '../engine.ts';
import { compileRuleSet } from './compiler.ts';
import { CompiledInspector } from '../inspector.ts';

// A paranoia-style gate, a setting check, a check whose match is read back through MATCHED_VAR*,
// and the ctl actions that change how such rules run.
const RULES = `
SecRuleEngine On
SecDefaultAction "phase:1,log,auditlog,pass"
SecAction "id:1,phase:1,pass,nolog,setvar:tx.level=2"
SecRule ARGS:level "@rx ^[0-9]$" "id:2,phase:1,pass,nolog,setvar:tx.level=%{MATCHED_VAR}"
SecRule ARGS:nogate "@streq 1" "id:3,phase:1,pass,nolog,ctl:ruleRemoveById=11"
SecRule ARGS:notarget "@streq 1" "id:4,phase:1,pass,nolog,ctl:ruleRemoveTargetById=12;TX:LEVEL"
SecRule &TX:threshold "@eq 0" "id:10,phase:1,pass,nolog,setvar:tx.threshold=5"
SecRule TX:LEVEL "@lt 2" "id:11,phase:1,pass,nolog,skipAfter:END-LEVEL-2"
SecRule ARGS "@rx two" "id:20,phase:1,pass,log,msg:'level 2 rule'"
SecMarker END-LEVEL-2
SecRule TX:LEVEL "@ge 2" "id:12,phase:1,pass,nolog,setvar:tx.seen=%{MATCHED_VAR_NAME}-%{MATCHED_VAR}"
SecRule REQUEST_URI "@rx ." "id:30,phase:1,pass,log,msg:'seen %{tx.seen} threshold %{tx.threshold}',chain"
  SecRule MATCHED_VARS_NAMES "@rx ^TX:" "t:none"
`;

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

test('TX checks on the short path: same matches and messages as the general loop (jumps, MATCHED_VAR*, setvars, ctl removals)', () => {
  const inspector = (txChecks: boolean): CompiledInspector =>
    new CompiledInspector(compileRuleSet([{ text: RULES, name: 'tx-check.conf' }], { txChecks }), { request: 1 << 20, response: 1 << 20 });
  const short = inspector(true);
  const general = inspector(false);
  const cases: [string, string[]][] = [
    // level 2: the gate does not jump, the level-2 rule runs, the TX match is read back by 30's chain
    ['/?a=two', ['20 level 2 rule', '30 seen TX:LEVEL-2 threshold 5']],
    // level 1: the gate jumps over 20; 12 does not match, so MATCHED_VARS holds no TX name for 30
    ['/?level=1&a=two', []],
    // the gate removed by ctl: 20 runs at level 1
    ['/?level=1&a=two&nogate=1', ['20 level 2 rule']],
    // 12's only variable removed by ctl: it cannot match (the general loop runs it)
    ['/?notarget=1', []],
  ];
  for (const [uri, expected] of cases) {
    const run = (i: CompiledInspector): string[] =>
      i.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => `${m.id} ${m.message}`);
    assert.deepEqual(run(short), expected, uri);
    assert.deepEqual(run(general), expected, `${uri} (general loop)`);
  }
});

test('TX checks see a TX variable set, set again, deleted and set anew in the same request', () => {
  const rules = `
SecRuleEngine On
SecRule &TX:flag "@eq 0" "id:1,phase:1,pass,nolog,setvar:tx.flag=1"
SecRule TX:flag "@eq 1" "id:2,phase:1,pass,nolog,setvar:tx.flag=2"
SecRule TX:flag "@eq 2" "id:3,phase:1,pass,nolog,setvar:!tx.flag"
SecRule &TX:flag "@eq 0" "id:4,phase:1,pass,nolog,setvar:tx.gone=yes"
SecRule ARGS:again "@streq 1" "id:5,phase:1,pass,nolog,setvar:tx.FLAG=7"
SecRule TX:flag "@eq 7" "id:6,phase:1,pass,nolog,setvar:tx.back=yes"
SecRule REQUEST_URI "@rx ." "id:9,phase:1,pass,log,msg:'gone=%{tx.gone} back=%{tx.back} flag=%{tx.flag}'"
`;
  const inspector = (txChecks: boolean): CompiledInspector =>
    new CompiledInspector(compileRuleSet([{ text: rules, name: 'tx-slots.conf' }], { txChecks }), { request: 1 << 20, response: 1 << 20 });
  for (const i of [inspector(true), inspector(false)]) {
    const run = (uri: string): string[] =>
      i.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => m.message);
    assert.deepEqual(run('/'), ['gone=yes back= flag=']);
    assert.deepEqual(run('/?again=1'), ['gone=yes back=yes flag=7']);
  }
});

test('TX variables named by a macro are seen by the reads of their key (made, then deleted, after a read found none)', () => {
  // the TX checks of TX:dyn keep the variable they found (Transaction.txSlotVars); a setvar
  // whose name is a macro makes and deletes it without naming that key
  const rules = `
SecRuleEngine On
SecRule &TX:dyn "@eq 0" "id:1,phase:1,pass,nolog,setvar:tx.before=absent"
SecRule ARGS:name "@rx ^[a-z]+$" "id:2,phase:1,pass,nolog,setvar:tx.%{MATCHED_VAR}=made"
SecRule &TX:dyn "@eq 1" "id:3,phase:1,pass,nolog,setvar:tx.after=%{tx.dyn}"
SecRule ARGS:drop "@rx ^[a-z]+$" "id:4,phase:1,pass,nolog,setvar:!tx.%{MATCHED_VAR}"
SecRule &TX:dyn "@eq 0" "id:5,phase:1,pass,nolog,setvar:tx.dropped=yes"
SecRule TX:dyn "@streq made" "id:6,phase:1,pass,nolog,setvar:tx.dyn=+1"
SecRule REQUEST_URI "@rx ." "id:9,phase:1,pass,log,msg:'before=%{tx.before} after=%{tx.after} dropped=%{tx.dropped} dyn=%{tx.dyn}'"
`;
  const inspector = (txChecks: boolean): CompiledInspector =>
    new CompiledInspector(compileRuleSet([{ text: rules, name: 'tx-dynamic.conf' }], { txChecks }), {
      request: 1 << 20,
      response: 1 << 20,
    });
  for (const i of [inspector(true), inspector(false)]) {
    const run = (uri: string): string[] =>
      i.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => m.message);
    assert.deepEqual(run('/?name=dyn'), ['before=absent after=made dropped= dyn=1']);
    assert.deepEqual(run('/?name=dyn&drop=dyn'), ['before=absent after=made dropped=yes dyn=']);
    assert.deepEqual(run('/?name=other'), ['before=absent after= dropped=yes dyn=']);
  }
});

test('TX checks of a count and the value of the same key (&TX:name|TX:name): each variable matches on its own, as in the general loop', () => {
  // the CRS's "exclusions for this application?" shape: skip unless the setting is there and not 0
  const rules = `
SecRuleEngine On
SecDefaultAction "phase:1,log,auditlog,pass"
SecRule ARGS:app "@rx ^[0-9]$" "id:1,phase:1,pass,nolog,setvar:tx.app=%{MATCHED_VAR}"
SecRule &TX:app|TX:app "@eq 0" "id:2,phase:1,pass,t:none,nolog,skipAfter:END-APP"
SecRule REQUEST_URI "@rx ." "id:3,phase:1,pass,log,msg:'app rules: %{MATCHED_VARS_NAMES}'"
SecMarker END-APP
SecRule &TX:made|TX:made "@eq 0" "id:4,phase:1,pass,nolog,setvar:tx.made=0,setvar:'tx.seen=%{tx.seen} %{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"
SecRule REQUEST_URI "@rx ." "id:5,phase:1,pass,log,msg:'4 matched:%{tx.seen}'"
`;
  const inspector = (txChecks: boolean): CompiledInspector =>
    new CompiledInspector(compileRuleSet([{ text: rules, name: 'tx-count-value.conf' }], { txChecks }), {
      request: 1 << 20,
      response: 1 << 20,
    });
  const short = inspector(true);
  const general = inspector(false);
  const cases: [string, string[]][] = [
    // absent: the count matches, the jump is taken; 4 matches on its count (named as the variable,
    // as ModSecurity does), then on the value its setvar made
    ['/', ['5 4 matched: TX:made=0 TX:made=0']],
    // set to 0: the count does not match, the value does: still the jump
    ['/?app=0', ['5 4 matched: TX:made=0 TX:made=0']],
    // set to 1: neither matches, the application's rules run (MATCHED_VARS were cleared)
    ['/?app=1', ['3 app rules: REQUEST_URI', '5 4 matched: TX:made=0 TX:made=0']],
  ];
  for (const [uri, expected] of cases) {
    const run = (i: CompiledInspector): string[] =>
      i.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => `${m.id} ${m.message}`);
    assert.deepEqual(run(general), expected, `${uri} (general loop)`);
    assert.deepEqual(run(short), expected, uri);
  }
  assert.ok(short.ruleSet.rulesById.get(2)?.txCheck !== undefined, 'rule 2 runs as a TxCheck');
});

test('TX gates: a chained or logging rule on one TX number is passed over only when it could not match', () => {
  const rules = `
SecRuleEngine On
SecRule ARGS:err "@rx ^[0-9]$" "id:1,phase:1,pass,nolog,setvar:tx.err=%{MATCHED_VAR}"
SecRule ARGS:drop "@streq 1" "id:2,phase:1,pass,nolog,setvar:!tx.err"
SecRule ARGS:notarget "@streq 1" "id:3,phase:1,pass,nolog,ctl:ruleRemoveTargetById=10;TX:err"
SecRule TX:err "@eq 1" "id:10,phase:1,pass,log,msg:'err is one',chain"
  SecRule REQUEST_URI "@rx x" "t:none"
SecRule TX:ERR "!@ge 5" "id:11,phase:1,pass,log,msg:'err below five (%{MATCHED_VAR_NAME}=%{MATCHED_VAR})'"
SecRule TX:err "@gt 7" "id:12,phase:1,pass,log,msg:'err above seven'"
SecRule MATCHED_VARS "@rx ." "id:20,phase:1,pass,log,msg:'left by 12: %{MATCHED_VAR}'"
`;
  const inspector = (txChecks: boolean): CompiledInspector =>
    new CompiledInspector(compileRuleSet([{ text: rules, name: 'tx-gate.conf' }], { txChecks }), { request: 1 << 20, response: 1 << 20 });
  const gated = inspector(true);
  assert.ok(gated.ruleSet.phaseTxGates[1]!.filter((g) => g !== undefined).length === 3, 'rules 10, 11 and 12 have gates');
  const general = inspector(false);
  const cases: [string, string[]][] = [
    // no TX:err: none of 10-12 has a value (11 is negated, and still does not match); 12 leaves
    // MATCHED_VARS empty for 20 unless it matched
    ['/x', []],
    ['/x?err=1', ['10 err is one', '11 err below five (TX:ERR=1)']],
    ['/y?err=1', ['11 err below five (TX:ERR=1)']],
    ['/x?err=6', []],
    ['/x?err=9', ['12 err above seven', '20 left by 12: 9']],
    ['/x?err=1&drop=1', []],
    // 10's variable removed by ctl: it cannot match
    ['/x?err=1&notarget=1', ['11 err below five (TX:ERR=1)']],
  ];
  for (const [uri, expected] of cases) {
    const run = (i: CompiledInspector): string[] =>
      i.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => `${m.id} ${m.message}`);
    assert.deepEqual(run(gated), expected, uri);
    assert.deepEqual(run(general), expected, `${uri} (general loop)`);
  }
});
