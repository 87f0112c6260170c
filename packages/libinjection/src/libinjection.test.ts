import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { detectSqli, detectXss, loadSqliData, SQLI_DATA_FILE, tokenizesAsXss } from './index.ts';

/** testdata/libinjection.json: per input, ModSecurity's @detectSQLi fingerprint (null: none) and @detectXSS result. */
const golden = JSON.parse(readFileSync(new URL('../testdata/libinjection.json', import.meta.url), 'utf8')) as {
  readonly oracle: string;
  readonly cases: readonly (readonly [string, string | null, boolean])[];
};

test('libinjection: SQLi fingerprints and XSS on known inputs', () => {
  assert.equal(detectSqli("1' or '1'='1"), 's&sos');
  assert.equal(detectSqli('1 union select password from users'), '1UEnk');
  assert.equal(detectSqli('hello world'), null);
  assert.equal(detectSqli("O'Reilly"), null);
  assert.equal(detectXss('<script>alert(1)</script>'), true);
  assert.equal(detectXss('<a href="javascript:alert(1)">x</a>'), true);
  assert.equal(detectXss('" onmouseover="alert(1)'), true);
  assert.equal(detectXss('I <3 cats & dogs'), false);
});

test('libinjection: the same @detectSQLi fingerprints and @detectXSS results as ModSecurity (golden vectors)', () => {
  let sqliPositives = 0;
  let xssPositives = 0;
  for (const [input, sqli, xss] of golden.cases) {
    assert.equal(detectSqli(input), sqli, `@detectSQLi ${JSON.stringify(input)}`);
    assert.equal(detectXss(input), xss, `@detectXSS ${JSON.stringify(input)}`);
    if (sqli !== null) sqliPositives++;
    if (xss) xssPositives++;
  }
  assert.ok(
    golden.cases.length > 20_000 && sqliPositives > 100 && xssPositives > 100,
    `the vectors exercise both detectors (${sqliPositives} / ${xssPositives} positives)`,
  );
});

test('libinjection: an input with neither < nor = is never XSS (the shortcut agrees with the tokenizer)', () => {
  for (const [input] of golden.cases) {
    const plain = input.replace(/[<=]/g, '');
    assert.equal(tokenizesAsXss(plain), false, JSON.stringify(plain));
    assert.equal(detectXss(input), tokenizesAsXss(input), JSON.stringify(input));
  }
});

test('libinjection: the SQLi table is the shipped file, and nothing else is read for it', async () => {
  assert.equal(SQLI_DATA_FILE, fileURLToPath(new URL('../data/sqli-data.json', import.meta.url)));
  assert.ok(loadSqliData().words.size > 9000);
  // A process where every file but the shipped table looks absent to the loader: with no
  // libmodsecurity (or anything else) to read, detection still works.
  const probe = `
    import fs from 'node:fs';
    import { syncBuiltinESMExports } from 'node:module';
    import { fileURLToPath } from 'node:url';
    const allowed = ${JSON.stringify(SQLI_DATA_FILE)};
    // the package's own modules are read by the module loader
    const sources = ${JSON.stringify(fileURLToPath(new URL('.', import.meta.url)))};
    const seen = [];
    for (const name of ['readFileSync', 'existsSync', 'openSync', 'statSync']) {
      const real = fs[name];
      fs[name] = (path, ...rest) => {
        if (typeof path === 'string' && path.endsWith('.so.3') || String(path).includes('libmodsecurity')) throw Object.assign(new Error('ENOENT: ' + path), { code: 'ENOENT' });
        const file = String(path).startsWith('file:') ? fileURLToPath(String(path)) : String(path);
        if (file !== allowed && !file.startsWith(sources)) seen.push(file);
        return real(path, ...rest);
      };
    }
    syncBuiltinESMExports();
    const { detectSqli } = await import(${JSON.stringify(new URL('./index.ts', import.meta.url).href)});
    const fingerprint = detectSqli("1' or '1'='1");
    console.log(JSON.stringify({ fingerprint, seen }));
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', probe]);
  const result = JSON.parse(stdout) as { fingerprint: string | null; seen: string[] };
  assert.equal(result.fingerprint, 's&sos');
  assert.deepEqual(result.seen, [], 'the loader reads the shipped table only');
});
