import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { compileRuleSet } from './compiler.ts';
import { logicalLines, parseActions, parseOperator, parseSecLang, parseVariable, SecLangError, splitVariables } from './parser.ts';

test('seclang: continuations, comments and quoting', () => {
  const text = '# comment\nSecRule ARGS|!ARGS:foo "@rx a\\"b" \\\n    "id:1,\\\n    phase:2,msg:\'it\\\'s\',t:none"\n\nSecMarker "END"\n';
  const lines = logicalLines(text);
  assert.equal(lines.length, 2);
  assert.equal(lines[0]!.line, 2);
  const ds = parseSecLang(text, 'x.conf');
  assert.equal(ds.length, 2);
  const rule = ds[0]!;
  assert.equal(rule.kind, 'rule');
  if (rule.kind !== 'rule') return;
  assert.deepEqual(
    rule.operator,
    { name: 'rx', negated: false, param: 'a\\"b' },
    'escaped quotes stay verbatim, as ModSecurity v3 keeps them',
  );
  assert.deepEqual(
    rule.actions.map((a) => [a.name, a.value]),
    [
      ['id', '1'],
      ['phase', '2'],
      ['msg', "it\\'s"],
      ['t', 'none'],
    ],
  );
  assert.deepEqual(ds[1], { kind: 'marker', file: 'x.conf', line: 6, name: 'END' });
});

test('seclang: variables with selectors, regex selectors, exclusions and counts', () => {
  assert.deepEqual(splitVariables('REQUEST_COOKIES|!REQUEST_COOKIES:/__utm|x/|&ARGS|XML:/*|TX:/^a|b$/'), [
    'REQUEST_COOKIES',
    '!REQUEST_COOKIES:/__utm|x/',
    '&ARGS',
    'XML:/*',
    'TX:/^a|b$/',
  ]);
  assert.deepEqual(parseVariable('!REQUEST_COOKIES:/__utm/'), {
    count: false,
    exclude: true,
    collection: 'REQUEST_COOKIES',
    keyRegex: '__utm',
    text: '!REQUEST_COOKIES:/__utm/',
  });
  assert.deepEqual(parseVariable('&TX:foo'), { count: true, exclude: false, collection: 'TX', key: 'foo', text: '&TX:foo' });
  assert.deepEqual(parseVariable("&TX:'/WEB_ATTACK/'"), {
    count: true,
    exclude: false,
    collection: 'TX',
    keyRegex: 'WEB_ATTACK',
    text: "&TX:'/WEB_ATTACK/'",
  });
  assert.deepEqual(parseVariable('xml:/*'), { count: false, exclude: false, collection: 'XML', key: '/*', text: 'xml:/*' });
  assert.deepEqual(parseOperator('!@within %{tx.allowed_methods}'), { name: 'within', negated: true, param: '%{tx.allowed_methods}' });
  assert.deepEqual(parseOperator('^abc$'), { name: 'rx', negated: false, param: '^abc$' }, 'implicit @rx');
  assert.deepEqual(parseActions("setvar:'tx.a=+%{tx.b}',ctl:ruleRemoveTargetById=942100;ARGS:x"), [
    { name: 'setvar', value: 'tx.a=+%{tx.b}' },
    { name: 'ctl', value: 'ruleRemoveTargetById=942100;ARGS:x' },
  ]);
});

test('seclang: unknown directives, actions, operators, variables and bad patterns are load errors naming file and line', () => {
  const cases: [string, RegExp][] = [
    ['SecFoo On', /unknown directive SecFoo/],
    ['SecRule ARGS "@rx x" "id:1,phase:2,frobnicate"', /unknown action "frobnicate"/],
    ['SecRule ARGS "@verifyCC x" "id:1,phase:2"', /unsupported operator @verifycc/],
    ['SecRule NOPE "@rx x" "id:1,phase:2"', /unknown variable NOPE/],
    ['SecRule ARGS "@rx (?(1)a|b)" "id:1,phase:2"', /conditional/],
    ['SecRule ARGS "@rx \\p{L}" "id:1,phase:2"', /unsupported escape/],
    ['SecRule ARGS "@rx x" "id:1,phase:2,t:frob"', /unknown transformation/],
    ['SecRule ARGS "@rx x" "phase:2"', /must have an id/],
    ['SecRule ARGS "@rx x" "id:1,phase:2"\nSecRule ARGS "@rx y" "id:1,phase:2"', /duplicated/],
    ['SecRule ARGS "@rx x" "id:1,phase:2,chain"', /chained rule without a following rule/],
  ];
  for (const [text, message] of cases) {
    assert.throws(
      () => compileRuleSet([{ text: `\n${text}`, name: 'bad.conf' }]),
      (e: unknown) => e instanceof SecLangError && e.file === 'bad.conf' && e.line >= 2 && message.test(e.message),
      text,
    );
  }
});

test("seclang: the CRS 3.3.4 files and Debian's crs-setup.conf parse completely", () => {
  const dir = '/usr/share/modsecurity-crs/rules/';
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.conf'));
  } catch {
    return; // CRS not installed here
  }
  let rules = 0;
  for (const f of files) {
    for (const d of parseSecLang(readFileSync(dir + f, 'latin1'), f)) if (d.kind === 'rule') rules++;
  }
  assert.ok(rules > 700, `${rules} SecRule directives`);
});
