import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { addonString, readGolden } from '@tps/waf-conformance';
import type { TransformationVectors } from '@tps/waf-conformance';
import { Random } from '@tps/waf-conformance';
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
import { fromCodes, isHex, x2c } from './bytes.ts';

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

test('transformations: same output as ModSecurity on a corpus (golden vectors)', () => {
  const golden = readGolden<TransformationVectors>('transformations.json');
  assert.ok(Object.keys(golden.outputs).length >= 19);
  for (const [name, outputs] of Object.entries(golden.outputs)) {
    const fn = TRANSFORMATIONS.get(name);
    assert.ok(fn, `t:${name} exists`);
    for (const [k, input] of golden.inputs.entries())
      assert.equal(addonString(fn(input)), outputs[k], `t:${name} on ${JSON.stringify(input)}`);
  }
});

test('transformations: none changes a value without a byte of the kinds it is listed with (CHANGES_ON)', () => {
  const r = new Random(7);
  const pieces = [
    '%41',
    '%u0041',
    '&lt;',
    '&#65;',
    '\\x41',
    '\\41 ',
    '/*x*/',
    '/./',
    '/../',
    '//',
    '..',
    'a.',
    '\0',
    ' ',
    '\t',
    '\xa0',
    '\xc2',
    '\xc3\xa9',
    'é',
    '"',
    "'",
    '^',
    ',',
    ';',
    '(',
    'AbC',
    'abc',
    '0x41',
    '+',
    '\\',
  ];
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
  const pieces = [
    '.',
    '/',
    '*',
    '<',
    '!',
    '-',
    ':',
    '$',
    '(',
    ')',
    '|',
    '%',
    '%2e',
    '%u002e',
    '\\',
    '\0',
    ' ',
    '\t',
    ',',
    ';',
    '"',
    "'",
    '^',
    '&#46;',
    '\\x2e',
    'AbC',
    'x',
    '\xc3\xae',
    '\xff',
    '+',
  ];
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
        assert.equal(
          charMask(out) & ~(charMask(s) | effect.adds),
          0,
          `${name} added kinds to ${JSON.stringify(s)}: ${JSON.stringify(out)}`,
        );
      }
    }
  }
  assert.equal(literalEffect('cmdline', 'a.'), undefined, 'a literal with a letter: not known');
  assert.equal(literalEffect('cmdline', ' /'), undefined, 'a literal cmdLine can join across a space: not known');
});

test('transformations: compressWhitespace gives every run of whitespace as one space (random values, single spaces left as they are)', () => {
  let seed = 5;
  const random = (): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  const alphabet = ['a', 'b', ' ', ' ', '\t', '\n', '\v', '\f', '\r', '\xa0'];
  for (let n = 0; n < 5000; n++) {
    let value = '';
    const length = Math.floor(random() * 12);
    for (let i = 0; i < length; i++) value += alphabet[Math.floor(random() * (random() < 0.7 ? 3 : alphabet.length))]!;
    assert.equal(compressWhitespace(value), value.replace(/[\t-\r ]+/g, ' '), JSON.stringify(value));
  }
});

// The decoders as they were written before they went through the scratch buffers (an array of
// codes grown by push): the oracle of the test below.
function entityByte(digits: string, radix: number): number {
  // LONG_MAX = 2^63 - 1; beyond it strtol returns LONG_MAX, whose low byte is 0xFF.
  const big = BigInt(radix === 16 ? `0x${digits}` : digits);
  if (big > 0x7fffffffffffffffn) return 0xff;
  return Number(big & 0xffn);
}

function htmlEntityDecodeByArray(s: string): string {
  if (s.indexOf('&') < 0) return s;
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
  const isAlnum = (c: number): boolean => isDigit(c) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
  while (i < n) {
    let copy = 1;
    if (s.charCodeAt(i) === 0x26 && i + 1 < n) {
      let j = i + 1;
      if (s.charCodeAt(j) === 0x23) {
        copy++;
        if (j + 1 < n) {
          j++;
          const cx = s.charCodeAt(j);
          if (cx === 0x78 || cx === 0x58) {
            copy++;
            if (j + 1 < n) {
              j++;
              const k = j;
              while (j < n && isHex(s.charCodeAt(j))) j++;
              if (j > k) {
                out.push(entityByte(s.slice(k, j), 16));
                i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
                continue;
              }
            }
          } else {
            const k = j;
            while (j < n && isDigit(s.charCodeAt(j))) j++;
            if (j > k) {
              out.push(entityByte(s.slice(k, j), 10));
              i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
              continue;
            }
          }
        }
      } else {
        const k = j;
        while (j < n && isAlnum(s.charCodeAt(j))) j++;
        if (j > k) {
          const name = s.slice(k, j).toLowerCase();
          let byte = -1;
          if (name === 'quot') byte = 0x22;
          else if (name === 'amp') byte = 0x26;
          else if (name === 'lt') byte = 0x3c;
          else if (name === 'gt') byte = 0x3e;
          else if (name === 'nbsp') byte = 0xa0;
          if (byte >= 0) {
            out.push(byte);
            i = j < n && s.charCodeAt(j) === 0x3b ? j + 1 : j;
            continue;
          }
          copy = j - k + 1;
        }
      }
    }
    for (let z = 0; z < copy && i < n; z++) out.push(s.charCodeAt(i++));
  }
  return fromCodes(out);
}

function urlDecodeUniByArray(s: string): string {
  // without '%' only '+' changes (a form's spaces, the '+' of a media type): natively
  if (s.indexOf('%') < 0) return s.indexOf('+') < 0 ? s : s.replace(/\+/g, ' ');
  const n = s.length;
  const out: number[] = [];
  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      const c1 = s.charCodeAt(i + 1);
      if (i + 1 < n && (c1 === 0x75 || c1 === 0x55)) {
        if (i + 5 < n) {
          const h2 = s.charCodeAt(i + 2);
          const h3 = s.charCodeAt(i + 3);
          const h4 = s.charCodeAt(i + 4);
          const h5 = s.charCodeAt(i + 5);
          if (isHex(h2) && isHex(h3) && isHex(h4) && isHex(h5)) {
            let d = x2c(h4, h5);
            if (d > 0x00 && d < 0x5f && (h2 === 0x66 || h2 === 0x46) && (h3 === 0x66 || h3 === 0x46)) d += 0x20;
            out.push(d);
            i += 6;
          } else {
            out.push(c, c1);
            i += 2;
          }
        } else {
          out.push(c, c1);
          i += 2;
        }
      } else if (i + 2 < n && isHex(c1) && isHex(s.charCodeAt(i + 2))) {
        out.push(x2c(c1, s.charCodeAt(i + 2)));
        i += 3;
      } else {
        out.push(c);
        i++;
      }
    } else {
      out.push(c === 0x2b ? 0x20 : c);
      i++;
    }
  }
  return fromCodes(out);
}

test('transformations: urlDecodeUni and htmlEntityDecode give, through the scratch buffers, what the array of codes gives (random values)', () => {
  const r = new Random(11);
  // the bytes that steer both decoders, and some that do not (two wide characters, last: the wide path)
  const alphabet = [
    '%',
    'u',
    'U',
    'f',
    'F',
    '0',
    '9',
    'a',
    'A',
    '2',
    '+',
    '&',
    '#',
    'x',
    'X',
    ';',
    'l',
    't',
    'amp',
    'quot',
    'nbsp',
    'g',
    ' ',
    '\xff',
    '\x00',
    '\u0100',
    '\u20ac',
  ];
  for (let n = 0; n < 20000; n++) {
    let value = '';
    const length = r.int(16);
    const wide = r.chance(0.1);
    for (let i = 0; i < length; i++) value += alphabet[r.int(wide ? alphabet.length : alphabet.length - 2)]!;
    assert.equal(urlDecodeUni(value), urlDecodeUniByArray(value), JSON.stringify(value));
    assert.equal(htmlEntityDecode(value), htmlEntityDecodeByArray(value), JSON.stringify(value));
  }
});
