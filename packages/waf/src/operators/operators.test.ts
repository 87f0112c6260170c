import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AhoCorasick } from './aho-corasick.ts';
import { compileRuleSet } from '../seclang/compiler.ts';
import {
  atoll,
  BUILT_IN_OPERATORS,
  compareNumeric,
  compileOperator,
  invalidUtf8,
  isOperator,
  parsePmContent,
  pmFileLines,
  stoi,
  validateUrlEncoding,
} from './index.ts';
import type { CompiledRule } from '../seclang/program.ts';
import type { TransactionCollections } from '../transaction/collections.ts';

test('operators: numbers, @pm parsing, validation helpers', () => {
  assert.equal(atoll(' 42abc'), 42);
  assert.equal(atoll('-7'), -7);
  assert.equal(atoll('x'), 0);
  assert.equal(stoi('99999999999'), 0, 'std::stoi out of range: ModSecurity catches and uses 0');
  assert.deepEqual(parsePmContent('"a b  |41|c\\;"'), ['a', 'b', 'c;'], 'ModSecurity drops digits inside |hex|');
  assert.deepEqual(parsePmContent('|ab|x'), ['\xabx']);
  assert.deepEqual(pmFileLines('# comment\n  # indented comment\nfoo\n\nbar baz\n'), ['foo', 'bar baz']);
  assert.equal(validateUrlEncoding('a%41b'), false);
  assert.equal(validateUrlEncoding('a%4'), true);
  assert.equal(validateUrlEncoding('a%zz'), true);
  assert.equal(invalidUtf8('caf\xc3\xa9'), false);
  assert.equal(invalidUtf8('\xc0\xaf'), true, 'overlong');
  assert.equal(invalidUtf8('\xed\xa0\x80'), true, 'surrogate');
  const ac = new AhoCorasick(['Script', 'on']);
  assert.equal(ac.test('<SCRIPT>'), true);
  assert.equal(ac.search('a ONe'), 'on');
  assert.equal(ac.test('nothing'), false);
});

test('operators: the rule loop compares numbers as the numeric operators do', () => {
  const ctx = { file: 'x.conf', compileExpand: (text: string) => ({ text }), expand: () => '' };
  // neither argument is read by a numeric operator with a static operand
  const tx = undefined as unknown as TransactionCollections;
  const rule = undefined as unknown as CompiledRule;
  for (const name of ['eq', 'ge', 'gt', 'le', 'lt']) {
    for (const param of ['2', ' -3', 'abc', '99999999999', '0']) {
      const op = compileOperator({ name, param, negated: false }, ctx);
      const { numeric, operand } = op;
      assert.notEqual(numeric, 0, `@${name} ${param} is compared in the loop`);
      for (const value of ['1', '2', '3', '-3', '', 'x', '2147483648', ' 5 ', '99999999999', '0']) {
        assert.equal(
          compareNumeric(numeric, operand, value),
          op.run(tx, rule, value),
          `@${name} ${JSON.stringify(param)} on ${JSON.stringify(value)}`,
        );
      }
    }
  }
  assert.equal(compileOperator({ name: 'streq', param: '2', negated: false }, ctx).numeric, 0);
  assert.equal(
    compileOperator({ name: 'lt', param: '%{tx.limit}', negated: false }, { ...ctx, compileExpand: () => ({ parts: [] }) }).numeric,
    0,
    'an operand with macros is left to run()',
  );
});

test('operators: one module each, registered by name; an unknown, disabled or unusable one is a load error naming the rule', () => {
  const names = BUILT_IN_OPERATORS.flatMap((o) => o.names);
  assert.equal(new Set(names).size, names.length, 'no name registered twice');
  for (const name of ['rx', 'pm', 'pmf', 'pmfromfile', 'ipmatchf', 'ipmatchfromfile', 'detectsqli', 'detectxss', 'validatebyterange'])
    assert.ok(isOperator(name), name);
  const compile = (rule: string, disabledOperators?: string[]) =>
    compileRuleSet([{ text: rule, name: 'rules' }], { ...(disabledOperators && { disabledOperators }) });
  assert.throws(
    () => compile('SecRule ARGS "@nosuch x" "id:1,phase:2"'),
    /^SecLangError: rules:1: unknown or unsupported operator @nosuch$/,
  );
  assert.throws(
    () => compile('SecRule ARGS "@rx x" "id:1,phase:2"', ['rx']),
    /^SecLangError: rules:1: operator @rx is disabled in this rule set$/,
  );
  assert.throws(() => compile('SecRule ARGS "x" "id:1,phase:2"', ['RX']), /@rx is disabled/, 'an implicit @rx is an @rx');
  assert.doesNotThrow(() => compile('SecRule ARGS "@contains x" "id:1,phase:2"', ['rx']));
  assert.throws(() => compile('SecRule REMOTE_ADDR "@ipMatch 10.0.0.300" "id:1,phase:1"'), /rules:1: @ipMatch: bad address 10\.0\.0\.300/);
  assert.throws(() => compile('SecRule ARGS "@validateByteRange 9-2" "id:1,phase:2"'), /rules:1: @validateByteRange: bad range 9-2/);
});
