import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AhoCorasick } from './aho-corasick.ts';
import { atoll, compareNumeric, compileOperator, invalidUtf8, parsePmContent, pmFileLines, stoi, validateUrlEncoding } from './index.ts';
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
        assert.equal(compareNumeric(numeric, operand, value), op.run(tx, rule, value), `@${name} ${JSON.stringify(param)} on ${JSON.stringify(value)}`);
      }
    }
  }
  assert.equal(compileOperator({ name: 'streq', param: '2', negated: false }, ctx).numeric, 0);
  assert.equal(compileOperator({ name: 'lt', param: '%{tx.limit}', negated: false }, { ...ctx, compileExpand: () => ({ parts: [] }) }).numeric, 0, 'an operand with macros is left to run()');
});

