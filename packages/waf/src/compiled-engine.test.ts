import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { WafRequest, WafEngineSettings, WafEngineVerdict } from './engine.ts';
import { WafUnavailableError } from './engine.ts';
import { type CompiledEngine, createCompiledEngine, sharedRuleSet } from './compiled-engine.ts';
import { CompiledInspector } from './inspector.ts';

const BROWSER: [string, string][] = [
  ['Host', 'shop.example.com'],
  ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0'],
  ['Accept', 'text/html,application/xhtml+xml'],
  ['Accept-Language', 'en-US,en;q=0.5'],
];

function get(uri: string, headers: [string, string][] = BROWSER): WafRequest {
  return {
    clientIp: '203.0.113.7',
    clientPort: 50000,
    serverIp: '198.51.100.1',
    serverPort: 80,
    method: 'GET',
    uri,
    httpVersion: '1.1',
    headers,
  };
}

const ids = (v: WafEngineVerdict): number[] => [...new Set(v.matchedRules.map((m) => m.id))].sort();

let engine: CompiledEngine;
before(async () => {
  engine = await createCompiledEngine();
});
after(async () => {
  await engine.close();
});

test('compiled engine: attacks are interrupted by the anomaly score in BLOCKING mode, benign traffic passes', async () => {
  const blocking: WafEngineSettings = { paranoiaLevel: 1, mode: 'BLOCKING' };
  const benign = await engine.inspectRequest(get('/products?q=red+shoes&page=2'), blocking);
  assert.equal(benign.interrupt, undefined);
  assert.deepEqual(benign.matchedRules, []);
  for (const [uri, rule] of [
    ["/?id=1'%20or%20'1'%3D'1", 942100],
    ['/?q=<script>alert(1)</script>', 941100],
    ['/../../etc/passwd', 930100],
  ] as const) {
    const v = await engine.inspectRequest(get(uri), blocking);
    assert.equal(v.interrupt?.status, 403, uri);
    assert.equal(v.interrupt?.ruleId, 949110, uri);
    assert.ok(ids(v).includes(rule), `${uri}: ${ids(v).join(',')}`);
    const logging = await engine.inspectRequest(get(uri), { paranoiaLevel: 1, mode: 'LOGGING' });
    assert.deepEqual(ids(logging), ids(v), 'LOGGING reports the same matches');
    const m = v.matchedRules.find((r) => r.id === rule)!;
    assert.ok(m.message.length > 0 && m.severity === 2 && m.phase === 2, JSON.stringify(m));
    // as in ModSecurity 3.0.9, multiMatch rules (942100, 930100) are logged before their tags are collected
    if (rule === 941100) assert.ok(m.tags.includes('attack-xss'));
  }
});

test('compiled engine: per-proxy settings are data (paranoia, threshold, exclusions) on one shared rule set', async () => {
  const uri = `/search?q=${encodeURIComponent("foo' having 1=1--")}`;
  const pl1 = await engine.inspectRequest(get(uri), { paranoiaLevel: 1, mode: 'LOGGING' });
  const pl4 = await engine.inspectRequest(get(uri), { paranoiaLevel: 4, mode: 'LOGGING' });
  assert.ok(ids(pl4).length > ids(pl1).length, 'higher paranoia, more rules');
  const high = await engine.inspectRequest(get(uri), { paranoiaLevel: 1, mode: 'BLOCKING', anomalyThreshold: 1000 });
  assert.equal(high.interrupt, undefined, 'a high threshold lets it through');
  const sqli = "/?id=1'%20or%20'1'%3D'1";
  const excluded = await engine.inspectRequest(get(sqli), { paranoiaLevel: 1, mode: 'LOGGING', ruleExclusions: [{ ruleIds: [942100] }] });
  assert.ok(!ids(excluded).includes(942100));
  const otherArg = await engine.inspectRequest(get(sqli), {
    paranoiaLevel: 1,
    mode: 'LOGGING',
    ruleExclusions: [{ ruleIds: [942100], target: 'ARGS:q' }],
  });
  assert.ok(ids(otherArg).includes(942100), 'an exclusion for another field leaves the rule on');
  const targeted = await engine.inspectRequest(get(sqli), {
    paranoiaLevel: 1,
    mode: 'LOGGING',
    ruleExclusions: [{ ruleIds: [942100], target: 'ARGS:id' }],
  });
  assert.ok(!ids(targeted).includes(942100));
  const scoped = await engine.inspectRequest(get(sqli), {
    paranoiaLevel: 1,
    mode: 'LOGGING',
    ruleExclusions: [{ ruleIds: [942100], pathPrefix: '/api' }],
  });
  assert.ok(ids(scoped).includes(942100), 'path-scoped exclusion does not apply elsewhere');
  assert.equal(sharedRuleSet(), sharedRuleSet(), 'one compiled rule set per process and options');
  await assert.rejects(engine.inspectRequest(get('/'), { paranoiaLevel: 9 }), /paranoiaLevel/);
});

test('compiled engine: response phases through an exchange', async () => {
  const ex = await engine.beginExchange(get('/report'), { paranoiaLevel: 1, mode: 'LOGGING' });
  assert.deepEqual(ex.requestVerdict.matchedRules, []);
  const v = await ex.inspectResponse({
    status: 200,
    httpVersion: '1.1',
    headers: [['Content-Type', 'text/html']],
    body: Buffer.from('<html>You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version</html>'),
  });
  assert.ok(
    ids(v).some((id) => id >= 951000 && id < 952000),
    `SQL error leakage: ${ids(v).join(',')}`,
  );
});

test('compiled engine: load errors name the file and line', async () => {
  await assert.rejects(
    createCompiledEngine({ extraAfterRules: 'SecRule ARGS "@rx (" "id:1,phase:2"' }),
    /extra rules after the CRS:1: .*missing \)/,
  );
});

test('compiled engine (worker pool): a step that cannot be interrupted loses its worker (runaway backstop), the next request gets a new one', {
  timeout: 60_000,
}, async () => {
  // a pattern V8's linear engine cannot take (lookahead) with an exponential input: one regex run
  // the transaction cannot end between steps
  const restarts: string[] = [];
  const pool = await createCompiledEngine({
    workers: 1,
    requestBudgetMs: 100,
    runawayMs: 400,
    onThreadRestart: (cause) => restarts.push(cause),
    extraAfterRules: 'SecRule REQUEST_HEADERS:X-Redos "@rx ^(a+)+(?=b)c" "id:1000001,phase:1,pass,log,msg:\'redos\'"',
  });
  try {
    const redos = get('/', [...BROWSER, ['X-Redos', `${'a'.repeat(40)}x`]]);
    await assert.rejects(pool.inspectRequest(redos, { paranoiaLevel: 1 }), WafUnavailableError);
    // the replacement worker compiles the rules again, then serves
    let verdict: WafEngineVerdict | undefined;
    for (let attempt = 0; attempt < 50 && !verdict; attempt++) {
      try {
        verdict = await pool.inspectRequest(get('/?q=hello'), { paranoiaLevel: 1 });
      } catch {
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    assert.deepEqual(verdict?.matchedRules, []);
    assert.deepEqual(restarts, ['runaway']);
  } finally {
    await pool.close();
  }
});

test('compiled engine (worker pool): time queued behind other requests does not count against the budget', {
  timeout: 60_000,
}, async () => {
  // Room for all 200 in the queue, for as long as they take: this is about the budget, not shedding.
  const pool = await createCompiledEngine({ workers: 1, requestBudgetMs: 250, queueLength: 200, maxQueueWaitMs: 60_000 });
  try {
    const items = Array.from({ length: 40 }, (_, i) => ({ id: i, name: `Product ${i}`, tags: ['new', 'sale'], stock: { count: i } }));
    const body = Buffer.from(JSON.stringify({ items }));
    const post: WafRequest = {
      ...get('/api/cart'),
      method: 'POST',
      headers: [...BROWSER, ['Content-Type', 'application/json'], ['Content-Length', String(body.length)]],
      body,
    };
    // Queued at once: the last ones wait far longer than 250 ms in all, while each runs a few ms.
    const started = performance.now();
    const verdicts = await Promise.all(Array.from({ length: 200 }, () => pool.inspectRequest(post, { paranoiaLevel: 4 })));
    assert.equal(verdicts.length, 200);
    assert.ok(performance.now() - started > 250, 'the queue took longer than one budget (else this test proves nothing)');
  } finally {
    await pool.close();
  }
});

test('compiled engine (worker pool): exchanges begun in one turn of the event loop, posted together, each get their own verdicts', {
  timeout: 60_000,
}, async () => {
  const pool = await createCompiledEngine({ workers: 1 });
  try {
    const blocking: WafEngineSettings = { paranoiaLevel: 1, mode: 'BLOCKING' };
    const uris = Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? `/?id=${i}'%20or%20'1'%3D'1` : `/products?page=${i}`));
    // begun in the same turn: their requests go to the worker as one batch
    const exchanges = await Promise.all(uris.map((uri) => pool.beginExchange(get(uri), blocking)));
    for (const [i, ex] of exchanges.entries()) assert.equal(ex.requestVerdict.interrupt?.status, i % 3 === 0 ? 403 : undefined, uris[i]);
    const leak = Buffer.from('<html>You have an error in your SQL syntax; check the manual</html>');
    const responses = await Promise.all(
      exchanges.map((ex, i) =>
        ex.inspectResponse({
          status: 200,
          httpVersion: '1.1',
          headers: [['Content-Type', 'text/html']],
          body: i % 2 === 0 ? leak : Buffer.from('<html>ok</html>'),
        }),
      ),
    );
    responses.forEach((v, i) => {
      // a blocked request's exchange is over: its response is not inspected
      const leaked = ids(v).some((id) => id >= 951000 && id < 952000);
      assert.equal(leaked, i % 3 !== 0 && i % 2 === 0, `${uris[i]}: ${ids(v).join(',')}`);
    });
  } finally {
    await pool.close();
  }
});

test('compiled engine: a transaction holds nothing once its last verdict is out (and cannot be written to)', () => {
  const inspector = new CompiledInspector(sharedRuleSet(), { request: 1 << 20, response: 1 << 20 });
  const settings: WafEngineSettings = { paranoiaLevel: 1, mode: 'BLOCKING' };
  const { open } = inspector.inspectRequest(get('/products?id=1'), settings, true);
  assert.ok(open);
  assert.ok(open.tx.args.length > 0 && open.tx.txStore.size > 0, 'an open transaction keeps its data for the response phases');
  const verdict = inspector.inspectResponse(open, {
    status: 200,
    httpVersion: '1.1',
    headers: [['Content-Type', 'text/plain']],
    body: Buffer.from('ok'),
  });
  assert.deepEqual(verdict.matchedRules, []);
  assert.equal(open.tx.args.length, 0);
  assert.equal(open.tx.requestHeaders.length, 0);
  assert.equal(open.tx.txStore.size, 0);
  assert.equal(open.tx.messages.length, 0);
  assert.throws(() => open.tx.args.push(open.tx.args[0]!), TypeError);
});

test('compiled engine (worker pool): past its queue it sheds the flooding client, not the others', { timeout: 60_000 }, async () => {
  const pool = await createCompiledEngine({ workers: 1, inFlightPerWorker: 2, queueLength: 4 });
  try {
    const flood = Array.from({ length: 40 }, () =>
      pool.inspectRequest({ ...get('/flood'), clientIp: '198.51.100.7' }, { paranoiaLevel: 1 }).then(
        () => 'inspected',
        (e: Error) => e.name,
      ),
    );
    const benign = Array.from({ length: 3 }, (_, i) =>
      pool.inspectRequest({ ...get('/page'), clientIp: `203.0.113.${i + 1}` }, { paranoiaLevel: 1 }).then(
        () => 'inspected',
        (e: Error) => e.name,
      ),
    );
    const flooded = await Promise.all(flood);
    assert.deepEqual(await Promise.all(benign), ['inspected', 'inspected', 'inspected']);
    assert.equal(
      flooded.filter((r) => r === 'inspected').length,
      2 + 4 - 3,
      'the flooder keeps the slots and what the others left of the queue',
    );
    assert.ok(flooded.filter((r) => r !== 'inspected').every((r) => r === 'WafOverloadedError'));
  } finally {
    await pool.close();
  }
});

/** The same headers as the flat list the proxy hands over. */
const flat = (pairs: readonly (readonly [string, string])[]): string[] => pairs.flat();

test('compiled engine: headers as a flat list or as pairs give the same verdicts, in process and in the pool', async () => {
  const scanner: [string, string][] = [
    ...BROWSER.filter(([name]) => name !== 'User-Agent'),
    ['User-Agent', 'nikto/2.5.0'],
    ['X-Forwarded-For', '1.2.3.4'],
  ];
  const excluded: WafEngineSettings = {
    paranoiaLevel: 2,
    mode: 'LOGGING',
    ruleExclusions: [{ ruleIds: [913100], target: 'REQUEST_HEADERS:user-agent' }],
  };
  const response = { status: 500, httpVersion: '1.1', body: Buffer.from('You have an error in your SQL syntax; check the manual') };
  const responseHeaders: [string, string][] = [
    ['Content-Type', 'text/html'],
    ['Content-Length', '53'],
  ];
  const pool = await createCompiledEngine({ workers: 1 });
  try {
    for (const eng of [engine, pool]) {
      for (const settings of [{ paranoiaLevel: 2, mode: 'LOGGING' } as const, excluded]) {
        const byPairs = await eng.beginExchange(get('/?q=1', scanner), settings);
        const byFlat = await eng.beginExchange({ ...get('/?q=1'), headers: flat(scanner) }, settings);
        assert.deepEqual(byFlat.requestVerdict, byPairs.requestVerdict);
        if (settings === excluded) assert.ok(!ids(byFlat.requestVerdict).includes(913100));
        else assert.ok(ids(byFlat.requestVerdict).includes(913100), `got ${ids(byFlat.requestVerdict).join(',')}`);
        const answerPairs = await byPairs.inspectResponse({ ...response, headers: responseHeaders });
        const answerFlat = await byFlat.inspectResponse({ ...response, headers: flat(responseHeaders) });
        assert.deepEqual(answerFlat, answerPairs);
        // a 5xx status (950100) and a SQL error in the body (951230): response headers and body both read
        assert.deepEqual(ids(answerFlat), [950100, 951230, 959100]);
      }
    }
  } finally {
    await pool.close();
  }
});
