import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { asAddonString, ORACLE_AVAILABLE, simpleRequest, smallRuleSets } from '../differential/oracle.ts';
import { Random } from '../differential/corpus.ts';
import {
  base64Decode,
  CHANGES_ON,
  charMask,
  cmdLine,
  compressWhitespace,
  cssDecode,
  hexEncode,
  htmlEntityDecode,
  literalEffect,
  jsDecode,
  lowercase,
  normalizePath,
  normalizePathWin,
  removeComments,
  removeNulls,
  removeWhitespace,
  replaceComments,
  sha1,
  TRANSFORMATIONS,
  urlDecode,
  urlDecodeUni,
  utf8toUnicode,
} from './index.ts';

test('transformations: byte semantics of ModSecurity v3', () => {
  assert.equal(lowercase('ABC\xc0'), 'abc\xc0', 'only ASCII letters fold');
  assert.equal(urlDecode('a%41+b%4'), 'aA b%4');
  assert.equal(urlDecodeUni('%u0041%uff41%u00'), 'Aa%u00', 'IIS %u, full-width ASCII folded, short %u kept');
  assert.equal(htmlEntityDecode('&lt;&#x41;&#66&quot;&foo;&#999999999999999999999;'), '<AB"&foo;\xff');
  assert.equal(jsDecode('\\x41\\u0042\\101\\n\\q'), 'AB' + 'A' + '\n' + 'q');
  assert.equal(cssDecode('\\41 b\\0 c'), 'Ab', 'a decoded NUL ends the value');
  assert.equal(cmdLine('C:\\Win"d"ows ; ^dir  /x'), 'c:windows dir/x');
  assert.equal(cmdLine('a " ;b ,(c'), 'a b(c', 'a deleted quote does not end a run of spaces');
  assert.equal(compressWhitespace('a \t\n b\xa0c'), 'a b\xa0c');
  assert.equal(removeWhitespace('a b\xa0c\xc2d'), 'abcd');
  assert.equal(removeNulls('a\0b'), 'ab');
  assert.equal(replaceComments('a/*x*/b/*'), 'a b ');
  assert.equal(removeComments('a/*x*/b -- c'), 'ab ');
  assert.equal(normalizePath('/a/./b/../../c//d/'), '/c/d/');
  assert.equal(normalizePathWin('\\a\\..\\b'), '/b');
  assert.equal(normalizePath('.'), '', 'without a slash only a final dot can change');
  assert.equal(normalizePath('x.y'), 'x.y');
  assert.equal(utf8toUnicode('\xc3\xa9x'), '%u00e9x');
  assert.equal(utf8toUnicode('\xc3('), '(', 'the lead byte of a broken sequence is dropped');
  assert.equal(base64Decode('SGVsbG8='), 'Hello');
  assert.equal(base64Decode('SGV sbG8='), '', 'a blank inside a line is invalid: empty result');
});

test('transformations: same output as the ModSecurity addon on a corpus', { skip: !ORACLE_AVAILABLE }, () => {
  const inputs = [
    'plain text',
    'A%41%4%zz+%u0041%U00E9%uFF21%',
    '&lt;script&gt;&#x3c;&#60&amp;amp;&nbsp;&#xffffffffffff;&quot',
    '\\x3c\\u003c\\74\\8\\u12\\',
    '\\3c \\000041\\ff01\\\n\\g\\',
    '/a/b/../../../etc/./passwd//x/',
    '..\\..\\windows\\win.ini',
    'C:\\\\Program" Files\\x ; ping ,  127.0.0.1 /n ^1',
    'select/*comment*/1 -- rest',
    '<!-- a -->b#c--d',
    'caf\xc3\xa9 \xe2\x80\x99 \xf0\x9f\x98\x80 \xc3 \xc0\xaf \xed\xa0\x80 \xff\xfe',
    'a\x00b\x00',
    '  \t\x0b lots   of\r\n\r\n space \xa0\xc2  ',
    'VGhpcyBpcyBiYXNlNjQ=',
    'VGhp cyBp',
    'AbC DeF',
  ];
  const names = [...TRANSFORMATIONS.keys()].filter((n) => !['sha1', 'md5', 'parityeven7bit', 'parityodd7bit', 'parityzero7bit', 'hexdecode', 'sqlhexdecode', 'escapeseqdecode', 'removecommentschar', 'base64encode', 'urlencode', 'uppercase', 'trim', 'trimleft', 'trimright'].includes(n));
  let id = 1000;
  const rules = names
    .map((n) => `SecRule REQUEST_HEADERS "@unconditionalMatch" "id:${id++},phase:1,pass,log,t:none,t:${n},msg:'${n}',logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}',multiMatch"`)
    .join('\n');
  const both = smallRuleSets(rules);
  try {
    const request = simpleRequest({ headers: inputs.map((v, k) => [`h${k}`, v] as const) });
    const got = new Map<string, string>();
    for (const m of both.modsecurity(request)) {
      const eq = m.data.indexOf('=');
      got.set(`${m.message}/${m.data.slice(0, eq)}`, m.data.slice(eq + 1)); // last value wins: the transformed one
    }
    for (const n of names) {
      const fn = TRANSFORMATIONS.get(n)!;
      inputs.forEach((input, k) => {
        const expected = got.get(`${n}/REQUEST_HEADERS:h${k}`);
        assert.equal(asAddonString(fn(input)), expected, `t:${n} on ${JSON.stringify(input)}`);
      });
    }
  } finally {
    both.close();
  }
});

test('transformations: none changes a value without a byte of the kinds it is listed with (CHANGES_ON)', () => {
  const r = new Random(7);
  const pieces = ['%41', '%u0041', '&lt;', '&#65;', '\\x41', '\\41 ', '/*x*/', '/./', '/../', '//', '..', 'a.', '\0', ' ', '\t', '\xa0', '\xc2', '\xc3\xa9', 'é', '"', "'", '^', ',', ';', '(', 'AbC', 'abc', '0x41', '+', '\\'];
  for (const [name, mask] of CHANGES_ON) {
    const fn = TRANSFORMATIONS.get(name)!;
    // the bytes (and pieces) that hold none of the kinds: the transformation must leave them as they are
    const bytes: string[] = [];
    for (let c = 0; c < 256; c++) if ((charMask(String.fromCharCode(c)) & mask) === 0) bytes.push(String.fromCharCode(c));
    const quiet = pieces.filter((p) => (charMask(p) & mask) === 0);
    for (let k = 0; k < 3000; k++) {
      let s = '';
      for (let n = r.int(12); n >= 0; n--) s += r.chance(0.5) ? r.pick(bytes) : r.pick(quiet.length > 0 ? quiet : bytes);
      assert.equal(charMask(s) & mask, 0);
      assert.equal(fn(s), s, `${name} changed ${JSON.stringify(s)}`);
    }
  }
});

test('transformations: sha1, hexEncode and base64Decode of any length give what node:crypto and Buffer give', () => {
  const r = new Random(11);
  const binary = (length: number): string => {
    let s = '';
    for (let k = 0; k < length; k++) s += String.fromCharCode(r.int(256));
    return s;
  };
  // every padding case of the hand-written SHA-1 (55, 56, 63, 64 bytes ...) and crypto's range above 1 KB
  for (const length of [...Array.from({ length: 300 }, (_, k) => k), 1023, 1024, 1025, 5000]) {
    const s = binary(length);
    const expected = createHash('sha1').update(Buffer.from(s, 'latin1')).digest();
    assert.equal(sha1(s), expected.toString('latin1'), `sha1 of ${length} bytes`);
    assert.equal(hexEncode(s), Buffer.from(s, 'latin1').toString('hex'), `hexEncode of ${length} bytes`);
    const b64 = Buffer.from(s, 'latin1').toString('base64');
    assert.equal(base64Decode(b64), s, `base64Decode of ${b64.length} characters`);
  }
});

test('transformations: none makes a letter-free literal appear without a byte of the kinds literalEffect gives, or adds other kinds', () => {
  const r = new Random(13);
  const literals = ['..', '/*', '*/', '<!--', '::', '$(', '||', '%', '\\\\', '\0', '. .', ';', '--'];
  const pieces = ['.', '/', '*', '<', '!', '-', ':', '$', '(', ')', '|', '%', '%2e', '%u002e', '\\', '\0', ' ', '\t', ',', ';', '"', "'", '^', '&#46;', '\\x2e', 'AbC', 'x', '\xc3\xae', '\xff', '+'];
  for (const name of [...CHANGES_ON.keys(), 'cmdline']) {
    const fn = TRANSFORMATIONS.get(name)!;
    for (const literal of literals) {
      const effect = literalEffect(name, literal);
      if (effect === undefined) continue;
      const usable = pieces.filter((p) => (charMask(p) & effect.creating) === 0);
      for (let k = 0; k < 2000; k++) {
        let s = '';
        for (let n = r.int(10); n >= 0; n--) s += r.pick(usable);
        if (s.includes(literal)) continue;
        const out = fn(s);
        assert.ok(!out.includes(literal), `${name} made ${JSON.stringify(literal)} from ${JSON.stringify(s)}: ${JSON.stringify(out)}`);
        assert.equal(charMask(out) & ~(charMask(s) | effect.adds), 0, `${name} added kinds to ${JSON.stringify(s)}: ${JSON.stringify(out)}`);
      }
    }
  }
  assert.equal(literalEffect('cmdline', 'a.'), undefined, 'a literal with a letter: not known');
  assert.equal(literalEffect('cmdline', ' /'), undefined, 'a literal cmdLine can join across a space: not known');
});
