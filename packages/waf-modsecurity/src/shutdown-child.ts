/**
 * Child process of the shutdown regression tests (addon.test.ts, engine.test.ts): stops threads that are busy in the ModSecurity addon, many times,
 * then exits the process while they are busy again. It must end with exit code 0: a thread stopped
 * in the middle of a Node-API call used to abort the whole process ("terminate called after
 * throwing an instance of 'Napi::Error'", SIGABRT).
 *
 *   node shutdown-child.ts addon  [cycles]   worker threads looping over the addon itself
 *   node shutdown-child.ts engine [cycles]   the ModSecurity engine (worker pool + CRS)
 *
 * Each cycle stops the threads after a different number of results while work is still queued, so
 * the stop lands at varied points of the phases; no timing is involved.
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { loadModSecurity } from './addon.ts';
import type { NativeTransaction } from './addon.ts';
import type { WafEngineSettings, WafRequest } from '@tps/waf';
import { createModSecurityEngine } from './engine.ts';

const RULES = `SecRuleEngine On
SecRequestBodyAccess On
SecResponseBodyAccess On
SecResponseBodyMimeType text/html
SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule ARGS "@rx (?i)<script" "id:1001,phase:2,t:none,t:urlDecodeUni,block,msg:'XSS in %{MATCHED_VAR_NAME}',logdata:'%{MATCHED_VAR}',severity:2,tag:'attack-xss',setvar:tx.score=+5"
SecRule ARGS|REQUEST_COOKIES "@detectSQLi" "id:1002,phase:2,t:none,block,capture,msg:'SQLi',logdata:'%{TX.0}',severity:2,tag:'attack-sqli',setvar:tx.score=+5"
SecRule TX:SCORE "@ge 5" "id:1004,phase:2,pass,msg:'score %{tx.score}'"
SecRule RESPONSE_BODY "@contains secret" "id:1005,phase:4,block,msg:'leak',severity:3"
`;

const encoder = new TextEncoder();

/** Worker side of `addon`: transactions through every phase, without end, some left open. */
function addonWorker(): void {
  const addon = loadModSecurity();
  const rules = new addon.RuleSet();
  rules.addRules(RULES);
  const body = encoder.encode(`{"q":"1' OR '1'='1","x":"<script>alert(1)</script>","pad":"${'a'.repeat(4000)}"}`);
  const page = encoder.encode(`<html>${'top secret '.repeat(400)}</html>`);
  const open: NativeTransaction[] = [];
  for (let i = 0; ; i++) {
    const tx = new addon.Transaction(rules, i.toString(16).padStart(32, '0'));
    tx.setVariable('paranoia_level', 2);
    tx.processConnection('203.0.113.7', 40000, '192.0.2.10', 443);
    tx.processUri(`/search?q=%3Cscript%3E${i}&id=1%27%20OR%20%271%27=%271`, 'POST', '1.1');
    tx.addRequestHeaders([
      ['Host', 'shop.example.com'],
      ['Content-Type', 'application/json'],
      ['Cookie', 'session=abc; theme=dark'],
    ]);
    tx.processRequestHeaders();
    tx.intervention();
    tx.appendRequestBody(body);
    tx.processRequestBody();
    tx.intervention();
    tx.matchedRules(0, true);
    if (i % 5 === 4) {
      open.push(tx); // left open: freed by close() later or by the finalizer at teardown
      if (open.length > 20) open.shift()!.close();
      continue;
    }
    tx.addResponseHeaders([['Content-Type', 'text/html']]);
    tx.processResponseHeaders(200, 'HTTP/1.1');
    tx.appendResponseBody(page);
    tx.processResponseBody();
    tx.processLogging();
    tx.matchedRules();
    tx.getVariable('score');
    tx.close();
    if (i % 4 === 0) parentPort!.postMessage(i);
  }
}

async function addonMain(cycles: number): Promise<void> {
  const start = (): Worker => new Worker(new URL(import.meta.url), { workerData: 'addon-worker' });
  const busy = (workers: Worker[], results: number): Promise<void> =>
    new Promise((resolve, reject) => {
      let seen = 0;
      for (const w of workers) {
        w.on('error', reject);
        w.on('message', () => {
          if (++seen === results) resolve();
        });
      }
    });
  for (let cycle = 0; cycle < cycles; cycle++) {
    const workers = [start(), start()];
    await busy(workers, 1 + (cycle % 7));
    await Promise.all(workers.map((w) => w.terminate()));
  }
  // Process exit with busy workers: Node stops them itself.
  const workers = [start(), start()];
  await busy(workers, 3);
  process.exit(0);
}

const H: [string, string][] = [
  ['Host', 'shop.example.com'],
  ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0'],
  ['Accept', 'text/html'],
  ['Cookie', 'session=7f3a9c2e4b1d; theme=dark'],
];

function request(i: number): WafRequest {
  const base = { clientIp: '203.0.113.7', clientPort: 50000 + i, serverIp: '192.0.2.10', serverPort: 443, httpVersion: '1.1' };
  switch (i % 4) {
    case 0:
      return { ...base, method: 'GET', uri: `/products/${i}?ref=home`, headers: H };
    case 1:
      return { ...base, method: 'GET', uri: "/?id=1'%20OR%20'1'='1&q=%3Cscript%3Ealert(1)%3C/script%3E", headers: H };
    case 2:
      return {
        ...base,
        method: 'POST',
        uri: '/login',
        headers: [...H, ['Content-Type', 'application/x-www-form-urlencoded']],
        body: encoder.encode(`user=bob&pass=x${i}&note=${'a'.repeat(2000)}`),
      };
    default:
      return {
        ...base,
        method: 'POST',
        uri: '/api',
        headers: [...H, ['Content-Type', 'application/json']],
        body: encoder.encode(JSON.stringify({ q: '1 UNION SELECT password FROM users --', i })),
      };
  }
}

async function engineMain(cycles: number): Promise<void> {
  const settings: WafEngineSettings = { paranoiaLevel: 2 };
  const page = encoder.encode(`<html>${'x'.repeat(1000)}</html>`);
  const traffic = async (stopAfter: number): Promise<void> => {
    const engine = await createModSecurityEngine({ workers: 2 });
    let settled = 0;
    let reached!: () => void;
    const stop = new Promise<void>((resolve) => (reached = resolve));
    for (let i = 0; i < 200; i++) {
      void (async () => {
        try {
          const exchange = await engine.beginExchange(request(i), settings);
          if (i % 5 === 4) return; // left open in the worker
          if (i % 7 === 3) exchange.end();
          else await exchange.inspectResponse({ status: 200, httpVersion: '1.1', headers: [['Content-Type', 'text/html']], body: page });
        } catch {
          // WafUnavailableError once the engine is closed
        } finally {
          if (++settled === stopAfter) reached();
        }
      })();
    }
    await stop;
    return engine.close();
  };
  for (let cycle = 0; cycle < cycles; cycle++) await traffic(1 + ((cycle * 5) % 23));
  // Process exit with busy workers.
  const engine = await createModSecurityEngine({ workers: 2 });
  const pending = Array.from({ length: 100 }, (_, i) => engine.inspectRequest(request(i), settings).catch(() => undefined));
  await Promise.race(pending);
  process.exit(0);
}

if (!isMainThread) {
  if (workerData === 'addon-worker') addonWorker();
} else {
  const mode = process.argv[2];
  const cycles = Number(process.argv[3] ?? 10);
  if (mode === 'addon') await addonMain(cycles);
  else if (mode === 'engine') await engineMain(cycles);
  else throw new Error('usage: shutdown-child.ts addon|engine [cycles]');
}
