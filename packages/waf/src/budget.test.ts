/**
 * The inspection budget (a transaction ends past its deadline, alone) and the input limits (a
 * request past one is refused by the limit's rule, its parser stopped there), in process and in
 * the worker pool.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { WafEngineSettings, WafEngineVerdict, WafInputLimits, WafRequest } from './engine.ts';
import { WafBudgetExceededError, WafSettingsError } from './engine.ts';
import { type CompiledEngine, createCompiledEngine } from './compiled-engine.ts';
import { INPUT_LIMIT_RULES } from './input-limits.ts';
import type { InputLimitName } from './input-limits.ts';

const HEADERS: [string, string][] = [
  ['Host', 'shop.example.com'],
  ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0'],
  ['Accept', 'text/html,application/xhtml+xml'],
];

function post(contentType: string, body: string | Buffer, uri = '/submit'): WafRequest {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'latin1') : body;
  return {
    clientIp: '203.0.113.7',
    clientPort: 50000,
    serverIp: '198.51.100.1',
    serverPort: 80,
    method: 'POST',
    uri,
    httpVersion: '1.1',
    headers: [...HEADERS, ['Content-Type', contentType], ['Content-Length', String(bytes.length)]],
    body: bytes,
  };
}

const benign = (): WafRequest => ({ ...post('application/x-www-form-urlencoded', 'q=red+shoes&page=2'), method: 'POST' });

/** Many arguments, each with a value that many transformation chains and operators go through. */
function expensiveForm(args = 999, valueLength = 200): WafRequest {
  const value = encodeURIComponent(`a${'<x y="1"> select from -- '.repeat(Math.ceil(valueLength / 26))}`.slice(0, valueLength));
  const parts: string[] = [];
  for (let i = 0; i < args; i++) parts.push(`field${i}=${value}`);
  return post('application/x-www-form-urlencoded', parts.join('&'));
}

const ids = (v: WafEngineVerdict): number[] => [...new Set(v.matchedRules.map((m) => m.id))];

let inProcess: CompiledEngine;
/** No budget: the limits' tests are about verdicts, on a shared machine. */
let unbounded: CompiledEngine;
before(async () => {
  inProcess = await createCompiledEngine({ requestBudgetMs: 50 });
  unbounded = await createCompiledEngine({ requestBudgetMs: 0 });
});
after(async () => {
  await inProcess.close();
  await unbounded.close();
});

test('budget, in process: a transaction past its deadline ends with WafBudgetExceededError; the next one on the same engine is served', async () => {
  const settings: WafEngineSettings = { paranoiaLevel: 4, mode: 'BLOCKING' };
  await assert.rejects(inProcess.inspectRequest(expensiveForm(), settings), WafBudgetExceededError);
  assert.throws(() => inProcess.inspectRequestSync(expensiveForm(), settings), WafBudgetExceededError);
  const verdict = await inProcess.inspectRequest(benign(), { paranoiaLevel: 1, mode: 'BLOCKING' });
  assert.equal(verdict.interrupt, undefined);
  assert.deepEqual(verdict.matchedRules, []);
});

test('budget, worker pool: the expensive request fails alone, the requests beside it on the same thread get verdicts, no thread restarts', {
  timeout: 120_000,
}, async () => {
  const restarts: string[] = [];
  const pool = await createCompiledEngine({ workers: 1, requestBudgetMs: 50, onThreadRestart: (cause) => restarts.push(cause) });
  try {
    const settings: WafEngineSettings = { paranoiaLevel: 4, mode: 'BLOCKING' };
    const outcomes = await Promise.allSettled([
      pool.inspectRequest(benign(), settings),
      pool.inspectRequest(expensiveForm(), settings),
      pool.inspectRequest(benign(), settings),
      pool.inspectRequest(expensiveForm(), settings),
      pool.inspectRequest(benign(), settings),
    ]);
    for (const i of [0, 2, 4]) {
      assert.equal(outcomes[i]!.status, 'fulfilled', String(i));
    }
    for (const i of [1, 3]) {
      assert.equal(outcomes[i]!.status, 'rejected');
      assert.ok(
        (outcomes[i] as PromiseRejectedResult).reason instanceof WafBudgetExceededError,
        String((outcomes[i] as PromiseRejectedResult).reason),
      );
    }
    assert.deepEqual(restarts, []);
  } finally {
    await pool.close();
  }
});

/** A body of `count` units of `limit`'s kind: at the limit it passes, one more is refused. */
const shapes: Record<InputLimitName, { limits: WafInputLimits; at: number; request: (count: number) => WafRequest }> = {
  arguments: {
    limits: { arguments: 20 },
    at: 20,
    // query string and body together
    request: (n) =>
      post(
        'application/x-www-form-urlencoded',
        Array.from({ length: n - 5 }, (_, i) => `b${i}=v`).join('&'),
        '/s?q1=a&q2=b&q3=c&q4=d&q5=e',
      ),
  },
  multipartParts: {
    limits: { multipartParts: 8 },
    at: 8,
    request: (n) => {
      let body = '';
      for (let i = 0; i < n; i++) {
        const file = i % 2 === 1 ? '; filename="f.txt"' : '';
        body += `--XyZ\r\nContent-Disposition: form-data; name="p${i}"${file}\r\n\r\nvalue ${i}\r\n`;
      }
      return post('multipart/form-data; boundary=XyZ', `${body}--XyZ--\r\n`);
    },
  },
  jsonDepth: {
    limits: { jsonDepth: 16 },
    at: 16,
    request: (n) => post('application/json', `${'{"a":'.repeat(n - 1)}{"leaf":"x"}${'}'.repeat(n - 1)}`),
  },
  jsonElements: {
    limits: { jsonElements: 30 },
    at: 30,
    // the outer array is one element: n - 1 numbers in it
    request: (n) => post('application/json', `[${Array.from({ length: n - 1 }, (_, i) => i).join(',')}]`),
  },
  xmlDepth: {
    limits: { xmlDepth: 12 },
    at: 12,
    request: (n) => post('application/xml', `<?xml version="1.0"?>${'<e>'.repeat(n)}text${'</e>'.repeat(n)}`),
  },
  valueLength: {
    limits: { valueLength: 1000 },
    at: 1000,
    request: (n) => post('application/x-www-form-urlencoded', `short=1&long=${'b'.repeat(n)}`),
  },
};

for (const [name, shape] of Object.entries(shapes) as [InputLimitName, (typeof shapes)[InputLimitName]][]) {
  const rule = INPUT_LIMIT_RULES[name];
  test(`input limit ${name}: passes at the limit, refused one past it by rule ${rule.id} (BLOCKING), logged in LOGGING`, async () => {
    const blocking: WafEngineSettings = { paranoiaLevel: 1, mode: 'BLOCKING', inputLimits: shape.limits };
    const at = await unbounded.inspectRequest(shape.request(shape.at), blocking);
    assert.ok(!ids(at).includes(rule.id), `at the limit: ${ids(at).join(',')}`);
    assert.equal(at.interrupt, undefined, JSON.stringify(at.matchedRules.map((m) => [m.id, m.message])));
    const past = await unbounded.inspectRequest(shape.request(shape.at + 1), blocking);
    assert.equal(past.interrupt?.ruleId, rule.id, JSON.stringify(past));
    const matched = past.matchedRules.find((m) => m.id === rule.id)!;
    assert.equal(matched.message, rule.message);
    assert.equal(matched.matchedData, `limit ${shape.at}`);
    // BLOCKING stops at the limit's rule: no CRS rule of phase 2 ran on what was parsed
    assert.deepEqual(ids(past), [rule.id]);
    const logging = await unbounded.inspectRequest(shape.request(shape.at + 1), { ...blocking, mode: 'LOGGING' });
    assert.ok(ids(logging).includes(rule.id));
    assert.ok(logging.interrupt !== undefined, 'LOGGING: the verdict says it would have been refused (the proxy logs it)');
  });
}

test('input limits: defaults are ModSecurity-recommended (1000 arguments), bad values are a settings error', async () => {
  const many = (n: number): WafRequest =>
    post('application/x-www-form-urlencoded', Array.from({ length: n }, (_, i) => `a${i}=1`).join('&'));
  const settings: WafEngineSettings = { paranoiaLevel: 1, mode: 'BLOCKING' };
  const engine = unbounded;
  assert.equal((await engine.inspectRequest(many(1000), settings)).interrupt, undefined);
  assert.equal((await engine.inspectRequest(many(1001), settings)).interrupt?.ruleId, 200007);
  await assert.rejects(engine.inspectRequest(many(1), { ...settings, inputLimits: { arguments: 0 } }), WafSettingsError);
  await assert.rejects(engine.inspectRequest(many(1), { ...settings, inputLimits: { jsonDepth: 1.5 } }), WafSettingsError);
});

test('input limits: a hostile body stops being parsed at the limit (a million separators, deep nesting)', async () => {
  const settings: WafEngineSettings = { paranoiaLevel: 1, mode: 'BLOCKING' };
  const engine = unbounded;
  {
    const separators = await engine.inspectRequest(post('application/x-www-form-urlencoded', '&'.repeat(1_000_000)), settings);
    assert.equal(separators.interrupt?.ruleId, 200007);
    const deepJson = await engine.inspectRequest(post('application/json', '['.repeat(200_000)), settings);
    assert.equal(deepJson.interrupt?.ruleId, INPUT_LIMIT_RULES.jsonDepth.id);
    const deepXml = await engine.inspectRequest(post('text/xml', '<a>'.repeat(100_000)), settings);
    assert.equal(deepXml.interrupt?.ruleId, INPUT_LIMIT_RULES.xmlDepth.id);
  }
});
