import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Random } from '@tps/waf-conformance';
import { extractArguments, getlineSplit, urlDecodeNonStrict } from './urlencoded.ts';
import { parseJsonBody } from './json.ts';
import { parseXml } from './xml.ts';

function jsonArgs(body: string): [string, string][] {
  const args: [string, string][] = [];
  parseJsonBody(body, {
    addArgument: (_o, k, v) => {
      args.push([k, v]);
      return true;
    },
  });
  return args;
}

test('JSON body: argument names as ModSecurity v3.0.9 gives them', () => {
  assert.deepEqual(jsonArgs('{"a":{"b":1},"c":[true,null,"x"],"":2}'), [
    ['json.a.b', '1'],
    ['json.c.array_0', 'true'],
    ['json.c.array_1', ''],
    ['json.c.array_2', 'x'],
    ['json.empty-key', '2'],
  ]);
  assert.deepEqual(jsonArgs('[[1],{"k":"\\u00e9"}]'), [
    ['json.array_0.array_0', '1'],
    ['json.array_1.k', '\xc3\xa9'],
  ]);
  assert.deepEqual(jsonArgs('"top"'), [['json', 'top']]);
  assert.equal(parseJsonBody('{"a":1', { addArgument: () => true }).error, 'premature EOF');
  assert.match(parseJsonBody('{"a":1}x', { addArgument: () => true }).error ?? '', /trailing garbage/);
});

test('XML body: root text and attribute values, errors keep the partial tree', () => {
  const ok = parseXml('<?xml version="1.0"?><a x="1"><b>hi &amp; <![CDATA[<raw>]]></b><c y="two"/></a>');
  assert.equal(ok.error, undefined);
  assert.equal(ok.document?.rootText, 'hi & <raw>');
  assert.deepEqual(ok.document?.attributes, ['1', 'two']);
  const bad = parseXml('<a><b>text</c></a>');
  assert.ok(bad.error);
  assert.equal(bad.document?.rootText, 'text');
});

test('urlencoded: tokens taken one at a time split exactly as getline() does (property, random strings)', () => {
  let seed = 20261127;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const alphabet = ['&', '=', 'a', 'b', '%', '+', '2', '6', ';', ''];
  for (let round = 0; round < 2000; round++) {
    let text = '';
    for (let k = random(24); k > 0; k--) text += alphabet[random(alphabet.length)];
    for (const separator of ['&', ';']) {
      const seen: [string, string][] = [];
      extractArguments({ addArgument: (_o, k, v) => seen.push([k, v]) > 0 }, 'POST', text, separator);
      const expected = getlineSplit(text, separator).map((token): [string, string] => {
        const eq = token.indexOf('=');
        return [urlDecodeNonStrict(eq < 0 ? token : token.slice(0, eq)).text, urlDecodeNonStrict(eq < 0 ? '' : token.slice(eq + 1)).text];
      });
      assert.deepEqual(seen, expected, JSON.stringify(text));
    }
  }
});

test('urlencoded: the parse stops when an argument is refused (a limit)', () => {
  let calls = 0;
  extractArguments({ addArgument: () => ++calls < 3 }, 'POST', 'a=1&b=2&c=3&d=4&e=5');
  assert.equal(calls, 3);
});

// urlDecodeNonStrict as it was written before it went through the scratch buffers (a string built
// piece by piece): the oracle of the test below.
function urlDecodeNonStrictByString(s: string): { text: string; invalid: boolean } {
  if (s.indexOf('%') < 0 && s.indexOf('+') < 0) return { text: s, invalid: false };
  let out = '';
  let invalid = false;
  const n = s.length;
  const hex = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
  let i = 0;
  let start = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      if (i + 2 < n + 1 && i + 2 <= n - 1 && hex(s.charCodeAt(i + 1)) && hex(s.charCodeAt(i + 2))) {
        out += s.slice(start, i) + String.fromCharCode(parseInt(s.slice(i + 1, i + 3), 16));
        i += 3;
        start = i;
        continue;
      }
      invalid = true;
      i++;
      continue;
    }
    if (c === 0x2b) {
      out += `${s.slice(start, i)} `;
      i++;
      start = i;
      continue;
    }
    i++;
  }
  out += s.slice(start);
  return { text: out, invalid };
}

test('urlencoded: urlDecodeNonStrict gives, through the scratch buffers, what the string path gives (random values)', () => {
  const r = new Random(7);
  // the bytes that steer the decoder, and some that do not (two wide characters, last: the wide path)
  const alphabet = ['%', '+', '0', '9', 'a', 'F', 'g', 'G', '2', '=', ' ', '\xff', '\x00', '\u0100', '\u20ac'];
  for (let n = 0; n < 20000; n++) {
    let value = '';
    const length = r.int(12);
    const wide = r.chance(0.1);
    for (let i = 0; i < length; i++) value += alphabet[r.int(wide ? alphabet.length : alphabet.length - 2)]!;
    assert.deepEqual(urlDecodeNonStrict(value), urlDecodeNonStrictByString(value), JSON.stringify(value));
  }
});
