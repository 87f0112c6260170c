import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PcreTranslationError, translatePcre } from './pcre.ts';
import { CompiledRegex, compileKeyRegex } from './runtime.ts';
import { lowerAscii } from '../ascii.ts';

const rx = (p: string, caseless = false): CompiledRegex => new CompiledRegex(p, caseless);

test('pcre: DOTALL and MULTILINE as ModSecurity compiles, with byte semantics', () => {
  assert.equal(rx('a.b').test('a\nb'), true, 'DOTALL: . matches a newline');
  assert.equal(rx('^b$').test('a\nb\nc'), true, 'MULTILINE ^ and $');
  assert.equal(rx('^b$').test('a\rb\rc'), false, 'CR is not a line end for PCRE');
  assert.equal(rx('a$').test('a\n'), true);
  assert.equal(rx('\\Aa').test('b\na'), false);
  assert.equal(rx('a\\Z').test('a\n'), true);
  assert.equal(rx('a\\z').test('a\n'), false);
  assert.equal(rx('\\s').test('\xa0'), false, 'PCRE \\s has no NBSP');
  assert.equal(rx('\\s').test('\x0b'), true, 'but has VT');
  assert.equal(rx('[\\v]').test('\x85'), true, '\\v is vertical space');
  assert.equal(rx('(?i)\xe0').test('\xc0'), false, 'caseless folds ASCII only');
  assert.equal(rx('(?i)abc').test('xAbC'), true);
  assert.equal(rx('a(?i:b)c').test('aBc'), true);
  assert.equal(rx('a(?i:b)c').test('aBC'), false);
  assert.equal(rx('[[:alpha:]]+[[:digit:]]').test('ab1'), true);
  assert.equal(rx('[]a]').test(']'), true, 'a leading ] is literal');
  assert.equal(rx('x\\x{41}\\101\\e').test('xAA\x1b'), true);
  assert.equal(rx('\\Q.*\\E').test('.*'), true);
  assert.equal(rx('(?x) a b # comment\n c').test('abc'), true);
  assert.equal(rx('(?<n>a)\\k<n>').test('aa'), true);
});

test('pcre: possessive quantifiers and atomic groups keep their meaning', () => {
  assert.equal(rx('a*+a').test('aaa'), false, 'possessive: gives nothing back');
  assert.equal(rx('a*a').test('aaa'), true);
  assert.equal(rx('(?>a+)b').test('aaab'), true);
  assert.equal(rx('(?>a|ab)c').test('abc'), false, 'atomic: no backtracking into the group');
  const t = translatePcre('(a)(?>(b))(c)\\3');
  assert.equal(t.groupCount, 3);
  const m = rx('(a)(?>(b))(c)\\3').exec('abcc');
  assert.deepEqual(m, ['abcc', 'a', 'b', 'c'], 'captures keep PCRE numbering around the emulation');
});

test('key selectors: a plain word (anchored or not) selects the same keys as the caseless expression', () => {
  const keys = [
    'header_name_accept',
    'HEADER_NAME_HOST',
    'x_header_name_',
    'header_name',
    'Header_Name_',
    'anomaly_score',
    'web_attack/sqli',
    'leak/WEB_ATTACK',
    'a-b-c',
    'A-B',
    '',
    'h\xe9ader_name_',
    'WEB_ATTACk',
  ];
  keys.push(
    'multipart_headers_content_types_text/plain',
    'MULTIPART_HEADERS_CONTENT_TYPE',
    'leakage\\/errors-sql',
    'LEAKAGE/ERRORS',
    'x.y',
    'xzy',
    'a*b',
    'ab',
    'b',
  );
  keys.push('paramcounter_ARGS_NAMES:id', 'TX_PARAMCOUNTER_', 'paramcounter', 'paramcounter_\nx', 'rfi_parameter_ARGS:url');
  const patterns = ['^header_name_', 'WEB_ATTACK', '^a-b', 'name_', 'x', '^[a-z]+$', 'paramcounter_.*'];
  patterns.push('MULTIPART_HEADERS_CONTENT_TYPES_*', 'LEAKAGE\\\\\\/ERRORS', 'x\\.y', '^ab?', 'b+', 'a\\**', 'a\\\\*', '^$', 'y$');
  patterns.push('rfi_parameter_.*', '^.*', '.*', 'x\\..*');
  for (const plain of ['^header_name_', 'paramcounter_.*', 'MULTIPART_HEADERS_CONTENT_TYPES_*'])
    assert.ok(compileKeyRegex(plain).testLowerCase !== undefined, `${plain} is a plain word`);
  for (const pattern of patterns) {
    const expression = new CompiledRegex(pattern, true);
    const selector = compileKeyRegex(pattern);
    for (const key of keys) {
      assert.equal(selector.test(key), expression.test(key), `${pattern} on ${key}`);
      if (selector.testLowerCase)
        assert.equal(selector.testLowerCase(lowerAscii(key)), expression.test(key), `${pattern} on ${key} lower-cased`);
    }
  }
});

test('pcre: what cannot be translated is an error', () => {
  for (const p of ['(?(1)a|b)', '(?R)', 'a\\Kb', '(*SKIP)', '\\p{L}', '\\x{100}', '(?|a)', 'a{2,1}']) {
    assert.throws(() => translatePcre(p), PcreTranslationError, p);
  }
});

test('ReDoS: catastrophic backtracking falls back to V8 linear engine (known ReDoS inputs)', { timeout: 30_000 }, () => {
  // classic exponential cases; each finishes only because V8 switches engines
  const cases: [string, string][] = [
    ['^(a+)+$', `${'a'.repeat(40)}!`],
    ['(x+x+)+y', 'x'.repeat(40)],
    ['^(\\w+\\s?)*$', 'hello world this is a long sentence with many words and then !'.repeat(2)],
    ['(?:[a-z]*[a-z]*)*=', 'b'.repeat(60)],
  ];
  for (const [p, input] of cases) {
    const re = rx(p);
    assert.equal(re.linear, true, `${p} can run on the linear engine`);
    assert.equal(re.test(input), false);
  }
});

test('prefilter: a set without one-letter literals is preferred (the command separators before a command name)', async () => {
  const { requiredLiterals } = await import('./prefilter.ts');
  const literals = (p: string): string[] | undefined => requiredLiterals(rx(p).translated.source)?.sort();
  assert.deepEqual(literals('(?:;|&|\\|)\\s*[sp]'), ['&', ';', '|'], 'not the letters, which every value has');
  assert.deepEqual(literals('[sp]\\s*x'), ['p', 's'], 'letters when nothing else is required');
  assert.deepEqual(literals('(?:<script|<form)\\s*:'), ['<form', '<script']);
  // a class of more than four bytes: its bytes, when none is a letter or digit (942430's count of "SQL characters")
  assert.deepEqual(literals('((?:[!-+\\-:-<][^!-+\\-:-<]*?){12})'), [
    '!',
    '"',
    '#',
    '$',
    '%',
    '&',
    "'",
    '(',
    ')',
    '*',
    '+',
    '-',
    ':',
    ';',
    '<',
  ]);
  assert.equal(literals('[!-+a]{3}'), undefined, 'a class with a letter tells nothing');
  assert.equal(literals('[^!-+]{3}'), undefined);
});

test('prefilter: every match of every CRS expression contains one of its required literals', async () => {
  const { readdirSync, readFileSync } = await import('node:fs');
  const { parseSecLang } = await import('../seclang/parser.ts');
  const { requiredLiterals } = await import('./prefilter.ts');
  const { readGolden } = await import('@tps/waf-conformance');
  const dir = '/usr/share/modsecurity-crs/rules/';
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.conf'));
  } catch {
    return;
  }
  // the attack payloads of the CRS regression tests (testdata/crs-payloads.json)
  const payloads = readGolden<{ payloads: string[] }>('crs-payloads.json').payloads.map((s) => Buffer.from(s, 'utf8').toString('latin1'));
  const subjects = [...payloads, ...payloads.map((p) => p.toUpperCase()), ...payloads.map((p) => p.replace(/ /g, '\n'))];
  let matches = 0;
  for (const f of files) {
    for (const d of parseSecLang(readFileSync(dir + f, 'latin1'), f)) {
      if (d.kind !== 'rule' || d.operator.name !== 'rx' || d.operator.param.includes('%{')) continue;
      const re = rx(d.operator.param);
      const literals = requiredLiterals(re.translated.source);
      if (!literals) continue;
      for (const s of subjects) {
        if (!re.test(s)) continue;
        matches++;
        const lower = s.replace(/[A-Z]/g, (c) => c.toLowerCase());
        assert.ok(
          literals.some((l) => lower.includes(l)),
          `${f} /${d.operator.param.slice(0, 60)}/ matches ${JSON.stringify(s.slice(0, 60))} without ${literals.slice(0, 5).join(' ')}`,
        );
      }
    }
  }
  assert.ok(matches > 1000);
});
