import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { crsPayloads, Random } from '../differential/corpus.ts';
import { ORACLE_AVAILABLE, simpleRequest, smallRuleSets } from '../differential/oracle.ts';
import { DEFAULT_LIBRARIES, GENERATED_FILE, loadSqliData } from './data.ts';
import { detectSqli } from './sqli.ts';
import { detectXss, tokenizesAsXss } from './xss.ts';

const DATA_AVAILABLE = existsSync(GENERATED_FILE) || DEFAULT_LIBRARIES.some((p) => existsSync(p));

test('libinjection: SQLi fingerprints and XSS on known inputs', { skip: !DATA_AVAILABLE }, () => {
  assert.equal(detectSqli("1' or '1'='1"), 's&sos');
  assert.equal(detectSqli('1 union select password from users'), '1UEnk');
  assert.equal(detectSqli('hello world'), null);
  assert.equal(detectSqli("O'Reilly"), null);
  assert.equal(detectXss('<script>alert(1)</script>'), true);
  assert.equal(detectXss('<a href="javascript:alert(1)">x</a>'), true);
  assert.equal(detectXss('" onmouseover="alert(1)'), true);
  assert.equal(detectXss('I <3 cats & dogs'), false);
});

/** Mutated CRS payloads and random token soups: what @detectSQLi/@detectXSS see in practice. */
function corpus(): string[] {
  const r = new Random(42);
  const base = crsPayloads().map((s) => Buffer.from(s, 'utf8').toString('latin1'));
  const pieces = ["'", '"', ' ', '--', '#', '/*', '*/', ' or ', ' and ', '1', '=', '(', ')', ' union select ', ',', ';', '@@version', '0x41', '`', '\\', '<', '>', '<script>', ' onerror=', 'javascript:', '&#x6a;', '\0', '\xa0', '\xff', "N'", "q'[", '$$', '{', '}', ' like ', ' in (', 'sleep(', '||', '!=', '<=>', '.', 'e1', 'select', 'from', 'user(', '\n', '<!--', '<svg', ' style=', 'x:expression('];
  const out = [...base];
  for (let k = 0; k < 12_000; k++) {
    let s = base.length > 0 ? r.pick(base) : 'x';
    for (let o = 0; o <= r.int(3); o++) {
      const p = r.pick(pieces);
      const at = r.int(s.length + 1);
      s = r.chance(0.5) ? s.slice(0, at) + p + s.slice(at) : s.slice(0, at) + s.slice(at + 1);
    }
    out.push(s);
    let soup = '';
    for (let o = 0; o <= r.int(8); o++) soup += r.pick(pieces);
    out.push(soup);
  }
  return out;
}

/**
 * Every word of the SQLi table that is one token (letters, digits, `_`), as written and
 * lower-cased, and numbers: the inputs detectSqli answers without tokenizing (its ONE_TOKEN
 * shortcut), to be checked against the addon, which always tokenizes.
 */
function oneTokenInputs(): string[] {
  const out = ['0', '00', '1', '42', '2147483648', '_', '_ga', 'x', 'N', 'q', 'b', 'e', 'u'];
  for (const word of loadSqliData().words.keys()) {
    if (!/^[A-Za-z_][0-9A-Za-z_]*$/.test(word)) continue;
    out.push(word, word.toLowerCase(), `${word}_1`);
  }
  return out;
}

test('libinjection: an input with neither < nor = is never XSS (the shortcut agrees with the tokenizer)', () => {
  for (const s of corpus()) {
    const plain = s.replace(/[<=]/g, '');
    assert.equal(tokenizesAsXss(plain), false, JSON.stringify(plain));
    assert.equal(detectXss(s), tokenizesAsXss(s), JSON.stringify(s));
  }
});

test('libinjection: same results (and SQLi fingerprints) as the ModSecurity addon', { skip: !ORACLE_AVAILABLE || !DATA_AVAILABLE }, () => {
  const both = smallRuleSets(
    [
      `SecRule REQUEST_HEADERS "@detectSQLi" "id:1,phase:1,pass,log,capture,multiMatch,t:none,msg:'s',logdata:'%{MATCHED_VAR_NAME}=%{TX.0}'"`,
      `SecRule REQUEST_HEADERS "@detectXSS" "id:2,phase:1,pass,log,multiMatch,t:none,msg:'x',logdata:'%{MATCHED_VAR_NAME}'"`,
    ].join('\n'),
  );
  const inputs = [...corpus(), ...oneTokenInputs()];
  let sqliPositives = 0;
  let xssPositives = 0;
  try {
    for (let i = 0; i < inputs.length; i += 400) {
      const chunk = inputs.slice(i, i + 400);
      const sqli = new Map<number, string>();
      const xss = new Set<number>();
      for (const m of both.modsecurity(simpleRequest({ headers: chunk.map((v, k) => [`h${k}`, v] as const) }))) {
        const mm = /^REQUEST_HEADERS:h(\d+)(?:=(.*))?$/s.exec(m.data);
        if (!mm) continue;
        if (m.id === 1) sqli.set(Number(mm[1]), mm[2] ?? '');
        else xss.add(Number(mm[1]));
      }
      chunk.forEach((s, k) => {
        assert.equal(detectSqli(s), sqli.get(k) ?? null, `@detectSQLi ${JSON.stringify(s)}`);
        assert.equal(detectXss(s), xss.has(k), `@detectXSS ${JSON.stringify(s)}`);
      });
      sqliPositives += sqli.size;
      xssPositives += xss.size;
    }
  } finally {
    both.close();
  }
  assert.ok(sqliPositives > 100 && xssPositives > 100, `the corpus exercises both detectors (${sqliPositives} / ${xssPositives} positives)`);
});
