// The ModSecurity engine (worker pool + Debian CRS 3.3.4) behind the WafEngine interface.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { WafSettingsError } from '@tps/waf';
import type { WafEngineSettings, WafEngineVerdict, WafRequest } from '@tps/waf';
import { modSecurityAddonBuilt } from './addon.ts';
import { createModSecurityEngine } from './engine.ts';
import type { ModSecurityEngine } from './engine.ts';

/** These tests need the addon: without it they skip, saying so. */
const skip = modSecurityAddonBuilt() ? false : 'the ModSecurity addon is not built (bash packages/waf-modsecurity/build.sh)';

const BROWSER_HEADERS: [string, string][] = [
  ['Host', 'shop.example.com'],
  ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0'],
  ['Accept', 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8'],
  ['Accept-Language', 'en-US,en;q=0.5'],
  ['Accept-Encoding', 'gzip, deflate, br, zstd'],
  ['Connection', 'keep-alive'],
  ['Cookie', 'session=7f3a9c2e4b1d; theme=dark'],
  ['Upgrade-Insecure-Requests', '1'],
  ['Sec-Fetch-Dest', 'document'],
  ['Sec-Fetch-Mode', 'navigate'],
  ['Sec-Fetch-Site', 'none'],
  ['Sec-Fetch-User', '?1'],
];

function get(uri: string, extra: Partial<WafRequest> = {}): WafRequest {
  return {
    clientIp: '203.0.113.7',
    clientPort: 51000,
    serverIp: '192.0.2.10',
    serverPort: 443,
    method: 'GET',
    uri,
    httpVersion: '1.1',
    headers: BROWSER_HEADERS,
    ...extra,
  };
}

const PL1: WafEngineSettings = { paranoiaLevel: 1 };
const ids = (v: WafEngineVerdict): number[] => v.matchedRules.map((r) => r.id);

let engine: ModSecurityEngine;
before(async () => {
  if (!skip) engine = await createModSecurityEngine({ workers: 2 });
});
after(async () => {
  if (!skip) await engine.close();
});

test('SQL injection in a query argument: 942100 and an interrupt at paranoia 1', { skip }, async () => {
  const v = await engine.inspectRequest(get("/?id=1'%20OR%20'1'='1"), PL1);
  assert.ok(ids(v).includes(942100), `got ${ids(v).join(',')}`);
  assert.ok(ids(v).includes(949110));
  assert.deepEqual(v.interrupt, { status: 403, ruleId: 949110, phase: 2 });
  assert.ok((v.anomalyScore ?? 0) >= 5);
  const sqli = v.matchedRules.find((r) => r.id === 942100)!;
  assert.equal(sqli.matchedVariable, 'ARGS:id');
  assert.match(sqli.matchedData ?? '', /1' OR '1'='1/);
  assert.equal(sqli.severity, 2);
  assert.match(sqli.message, /SQL Injection/);
});

test('XSS in a query argument: 9411xx rules and an interrupt', { skip }, async () => {
  const v = await engine.inspectRequest(get('/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E'), PL1);
  assert.ok(ids(v).includes(941100), `got ${ids(v).join(',')}`);
  assert.ok(ids(v).includes(941110));
  assert.equal(v.interrupt?.status, 403);
  const xss = v.matchedRules.find((r) => r.id === 941110)!;
  assert.equal(xss.matchedVariable, 'ARGS:q');
  assert.ok(xss.tags.includes('attack-xss'));
});

test('path traversal: 930100/930110 and an interrupt', { skip }, async () => {
  const v = await engine.inspectRequest(get('/../../etc/passwd'), PL1);
  assert.ok(ids(v).includes(930100), `got ${ids(v).join(',')}`);
  assert.ok(ids(v).includes(930110));
  assert.equal(v.interrupt?.status, 403);
});

test('a benign GET with browser headers matches nothing', { skip }, async () => {
  const v = await engine.inspectRequest(get('/products/42?ref=home&utm_source=newsletter'), PL1);
  assert.deepEqual(ids(v), []);
  assert.equal(v.interrupt, undefined);
  assert.equal(v.anomalyScore, 0);
});

test('a benign form POST and a JSON POST match nothing; a JSON attack is found in json.* arguments', { skip }, async () => {
  const form = Buffer.from('name=Jane+Doe&email=jane%40example.com&comment=Nice+shop%2C+thanks%21');
  const post = await engine.inspectRequest(
    get('/contact', {
      method: 'POST',
      headers: [...BROWSER_HEADERS, ['Content-Type', 'application/x-www-form-urlencoded'], ['Content-Length', String(form.length)]],
      body: form,
    }),
    PL1,
  );
  assert.deepEqual(ids(post), []);
  const json = Buffer.from('{"user":{"name":"<script>alert(1)</script>"}}');
  const api = await engine.inspectRequest(
    get('/api/users', {
      method: 'POST',
      headers: [...BROWSER_HEADERS, ['Content-Type', 'application/json'], ['Content-Length', String(json.length)]],
      body: json,
    }),
    PL1,
  );
  assert.ok(ids(api).includes(941100));
  assert.equal(api.matchedRules.find((r) => r.id === 941100)?.matchedVariable, 'ARGS:json.user.name');
});

test('exclusions: by rule id, by rule and field, scoped to a path prefix', { skip }, async () => {
  const attack = "/api/search?id=1'%20OR%20'1'='1";
  const byId = await engine.inspectRequest(get(attack), { paranoiaLevel: 1, ruleExclusions: [{ ruleIds: [942100] }] });
  assert.ok(!ids(byId).includes(942100));
  assert.equal(byId.interrupt, undefined);

  const otherField = await engine.inspectRequest(get(attack), {
    paranoiaLevel: 1,
    ruleExclusions: [{ ruleIds: [942100], target: 'ARGS:q' }],
  });
  assert.ok(ids(otherField).includes(942100), 'an exclusion of another field does not silence the rule');

  const field = await engine.inspectRequest(get(attack), {
    paranoiaLevel: 1,
    ruleExclusions: [{ ruleIds: [942100], target: 'ARGS:id', pathPrefix: '/api/' }],
  });
  assert.ok(!ids(field).includes(942100));

  const elsewhere = await engine.inspectRequest(get("/admin?id=1'%20OR%20'1'='1"), {
    paranoiaLevel: 1,
    ruleExclusions: [{ ruleIds: [942100], pathPrefix: '/api/' }],
  });
  assert.ok(ids(elsewhere).includes(942100), 'path-scoped exclusion does not apply to other paths');

  const dotted = await engine.inspectRequest(get("/api/../admin?id=1'%20OR%20'1'='1"), {
    paranoiaLevel: 1,
    ruleExclusions: [{ ruleIds: [942100], pathPrefix: '/api/' }],
  });
  assert.ok(ids(dotted).includes(942100), '/api/../admin is not under /api/');

  const cookie = await engine.inspectRequest(
    get('/', { headers: [...BROWSER_HEADERS.filter(([n]) => n !== 'Cookie'), ['Cookie', "session=1' OR '1'='1"]] }),
    { paranoiaLevel: 1, ruleExclusions: [{ ruleIds: [942100], target: 'REQUEST_COOKIES:session' }] },
  );
  assert.ok(!ids(cookie).includes(942100));
});

test('paranoia 4 matches more than paranoia 1 on the same request, with one shared rule set', { skip }, async () => {
  const request = get('/search?q=hello;world&sort=name--desc&a=b%27');
  const pl1 = await engine.inspectRequest(request, { paranoiaLevel: 1 });
  const pl4 = await engine.inspectRequest(request, { paranoiaLevel: 4 });
  assert.ok(pl4.matchedRules.length > pl1.matchedRules.length, `pl1 ${ids(pl1).join(',')} / pl4 ${ids(pl4).join(',')}`);
  const again = await engine.inspectRequest(request, { paranoiaLevel: 1 });
  assert.deepEqual(ids(again), ids(pl1), 'the level of one request does not leak into the next');
});

test('anomaly threshold per request', { skip }, async () => {
  const request = get("/?id=1'%20OR%20'1'='1");
  const low = await engine.inspectRequest(request, { paranoiaLevel: 1 });
  assert.ok(low.interrupt);
  const high = await engine.inspectRequest(request, { paranoiaLevel: 1, anomalyThreshold: 1000 });
  assert.equal(high.interrupt, undefined);
  assert.ok(ids(high).includes(942100), 'matches are still reported');
  assert.ok(!ids(high).includes(949110));
});

test('LOGGING mode evaluates every phase; BLOCKING stops at the interrupt', { skip }, async () => {
  const request = get('/?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E');
  const exchange = await engine.beginExchange(request, { paranoiaLevel: 1, mode: 'LOGGING' });
  assert.equal(exchange.requestVerdict.interrupt?.ruleId, 949110);
  const response = await exchange.inspectResponse({
    status: 200,
    httpVersion: '1.1',
    headers: [['Content-Type', 'text/html; charset=utf-8']],
    body: Buffer.from('<html><body>Warning: mysql_fetch_array() expects parameter 1 to be resource</body></html>'),
  });
  assert.ok(ids(response).includes(951230), `response rules: ${ids(response).join(',')}`);
  assert.equal(response.interrupt?.status, 403);

  const blocking = await engine.beginExchange(request, { paranoiaLevel: 1, mode: 'BLOCKING' });
  assert.ok(blocking.requestVerdict.interrupt);
  assert.deepEqual((await blocking.inspectResponse({ status: 200, httpVersion: '1.1', headers: [] })).matchedRules, []);

  const benign = await engine.beginExchange(get('/'), PL1);
  benign.end();
  benign.end();
});

test('bodies over the limit are inspected in part and flagged', { skip }, async () => {
  const small = await createModSecurityEngine({ workers: 1, requestBodyLimit: 64 });
  try {
    const body = Buffer.from(`a=${'x'.repeat(100)}&b=%3Cscript%3Ealert(1)%3C%2Fscript%3E`);
    const v = await small.inspectRequest(
      get('/form', {
        method: 'POST',
        headers: [...BROWSER_HEADERS, ['Content-Type', 'application/x-www-form-urlencoded'], ['Content-Length', String(body.length)]],
        body,
      }),
      PL1,
    );
    assert.equal(v.bodyTruncated, true);
    assert.ok(!ids(v).includes(941100), 'the part past the limit is not inspected (documented policy)');
    assert.ok(!ids(v).includes(200002), 'a truncated body is not a parse error');
  } finally {
    await small.close();
  }
});

test('the worker pool answers concurrent requests, each caller its own verdict (results of queued requests go back in batches)', {
  skip,
}, async () => {
  const requests = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? get(`/item/${i}`) : get(`/?id=${i}'%20OR%20'1'='1`)));
  const verdicts = await Promise.all(requests.map((r) => engine.inspectRequest(r, PL1)));
  verdicts.forEach((v, i) => {
    if (i % 2 === 0) assert.deepEqual(ids(v), [], `request ${i}`);
    else assert.ok(ids(v).includes(942100), `request ${i}`);
  });
  assert.equal(engine.pending, 0);
});

test('past its queue the pool sheds the flooding client, not the others (fair admission, as the compiled engine)', { skip }, async () => {
  const small = await createModSecurityEngine({ workers: 1, inFlightPerWorker: 2, queueLength: 4 });
  try {
    const outcome = (request: WafRequest) =>
      small.inspectRequest(request, PL1).then(
        () => 'inspected',
        (e: Error) => e.name,
      );
    const flood = Array.from({ length: 40 }, () => outcome(get('/flood', { clientIp: '198.51.100.7' })));
    const benign = Array.from({ length: 3 }, (_, i) => outcome(get('/page', { clientIp: `203.0.113.${i + 1}` })));
    const flooded = await Promise.all(flood);
    assert.deepEqual(await Promise.all(benign), ['inspected', 'inspected', 'inspected']);
    assert.equal(flooded.filter((r) => r === 'inspected').length, 3);
    assert.ok(flooded.filter((r) => r !== 'inspected').every((r) => r === 'WafOverloadedError'));
  } finally {
    await small.close();
  }
});

test('bad settings are refused before any work', { skip }, async () => {
  await assert.rejects(engine.inspectRequest(get('/'), { paranoiaLevel: 5 }), WafSettingsError);
  await assert.rejects(
    engine.inspectRequest(get('/'), { paranoiaLevel: 1, ruleExclusions: [{ ruleIds: [942100], target: 'NOPE:x' }] }),
    WafSettingsError,
  );
});

test('rules that do not load are reported at start', { skip }, async () => {
  await assert.rejects(
    createModSecurityEngine({ workers: 1, extraSetupRules: 'SecRule ARGS "@rx x" "id:1,' }),
    /could not load extra setup rules/,
  );
});

test('a closed engine refuses work', { skip }, async () => {
  const e = await createModSecurityEngine({ workers: 1 });
  await e.close();
  await assert.rejects(e.inspectRequest(get('/'), PL1), /closed/);
});

test('closing the engine or exiting the process while its workers are busy ends cleanly (no abort)', { skip }, async () => {
  // Regression: stopping a worker in the middle of an exchange aborted the process ("terminate
  // called after throwing an instance of 'Napi::Error'", seen at the end of bench/waf). Each child
  // runs exchanges (benign and attacks, bodies, response phases, some left open) and closes the
  // engine while they are in flight, 6 times, then exits the process while the workers are busy.
  const child = fileURLToPath(new URL('./shutdown-child.ts', import.meta.url));
  for (let run = 0; run < 3; run++) {
    const { code, signal, stderr } = await new Promise<{ code: number | null; signal: string | null; stderr: string }>((resolve) => {
      const proc = execFile(process.execPath, [child, 'engine', '6'], { timeout: 120_000 }, (_error, _stdout, stderr) =>
        resolve({ code: proc.exitCode, signal: proc.signalCode, stderr }),
      );
    });
    assert.equal(signal, null, `run ${run}: child ended by ${signal}: ${stderr}`);
    assert.equal(code, 0, `run ${run}: child exit code ${code}: ${stderr}`);
    assert.doesNotMatch(stderr, /terminate called|FATAL ERROR/);
  }
});

test('headers as a flat list (as the proxy hands them over) or as pairs give the same verdicts', { skip }, async () => {
  const scanner: [string, string][] = [...BROWSER_HEADERS.filter(([name]) => name !== 'User-Agent'), ['User-Agent', 'nikto/2.5.0']];
  const flat = (pairs: readonly (readonly [string, string])[]): string[] => pairs.flat();
  const settings: WafEngineSettings = { paranoiaLevel: 2, mode: 'LOGGING' };
  const byPairs = await engine.beginExchange(get('/?q=1', { headers: scanner }), settings);
  const byFlat = await engine.beginExchange(get('/?q=1', { headers: flat(scanner) }), settings);
  assert.deepEqual(byFlat.requestVerdict, byPairs.requestVerdict);
  assert.ok(ids(byFlat.requestVerdict).includes(913100), `got ${ids(byFlat.requestVerdict).join(',')}`);
  const response = { status: 500, httpVersion: '1.1', body: Buffer.from('You have an error in your SQL syntax; check the manual') };
  const headers: [string, string][] = [
    ['Content-Type', 'text/html'],
    ['Content-Length', '53'],
  ];
  const answerPairs = await byPairs.inspectResponse({ ...response, headers });
  const answerFlat = await byFlat.inspectResponse({ ...response, headers: flat(headers) });
  assert.deepEqual(answerFlat, answerPairs);
  assert.ok(ids(answerFlat).includes(950100), `got ${ids(answerFlat).join(',')}`);
});
