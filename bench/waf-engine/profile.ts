/**
 * Where the compiled engine's time goes: a CPU profile (V8's sampling profiler, in this thread) of
 * one request kind after the warm-up, its self time grouped into regular expressions, transformations,
 * operators, collections/variables, the rule loop and the rest, then the top frames.
 *
 *   SCENARIO=get PARANOIA=1 node bench/waf-engine/profile.ts
 *
 * SCENARIO: get, post, json, attack (bench/waf-engine/requests.ts); the response phases run too
 * (RESPONSE=0: not), as in bench/waf. SECONDS of profile (5), after WARMUP_MS (5000).
 */
import { Session } from 'node:inspector/promises';
import { restartOnProductRuntime } from '../../src/cli/runtime.ts';
import { warmedExchange } from './warm-exchange.ts';

restartOnProductRuntime();

const { exchange, label } = warmedExchange(5000);

const session = new Session();
session.connect();
await session.post('Profiler.setSamplingInterval', { interval: 50 });
await session.post('Profiler.enable');
await session.post('Profiler.start');
const cpu0 = process.cpuUsage();
let n = 0;
const end = performance.now() + Number(process.env.SECONDS ?? 5) * 1000;
while (performance.now() < end) {
  exchange();
  n++;
}
const cpu = process.cpuUsage(cpu0);
const { profile } = await session.post('Profiler.stop');
const perRequest = (cpu.user + cpu.system) / n;

const self = new Map<number, number>();
for (const id of profile.samples ?? []) self.set(id, (self.get(id) ?? 0) + 1);
const categoryOf = (url: string, name: string): string => {
  if (name.startsWith('RegExp:') || /regex\//.test(url)) return 'regular expressions';
  if (url.includes('/transformations/')) return 'transformations';
  if (url.includes('/operators/')) return 'operators (other than rx)';
  // the literal prefilter's scan (prefilter/scanner.ts) with the rest of its bookkeeping (literal-cache.ts)
  if (
    url.includes('/variables/') ||
    url.includes('collections') ||
    url.includes('value-cache') ||
    url.includes('literal-cache') ||
    url.includes('/prefilter/')
  )
    return 'collections / variables';
  if (url.includes('/transaction/') || url.includes('/seclang/')) return 'rule loop / actions';
  if (url.includes('/body/')) return 'body parsing';
  if (name === '(garbage collector)') return 'garbage collector';
  if (url === '') return `native: ${name}`;
  if (url.startsWith('node:')) return 'node internals';
  return 'other JS';
};
const byCategory = new Map<string, number>();
const byFrame = new Map<string, number>();
const total = profile.samples?.length ?? 1;
for (const node of profile.nodes) {
  const count = self.get(node.id) ?? 0;
  const { functionName, url, lineNumber } = node.callFrame;
  const category = categoryOf(url, functionName);
  byCategory.set(category, (byCategory.get(category) ?? 0) + count);
  const key = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(packages|src|node_modules|bench)\//, '$1/')}:${lineNumber + 1}`;
  byFrame.set(key, (byFrame.get(key) ?? 0) + count);
}
const pct = (count: number): string => `${((count / total) * 100).toFixed(1).padStart(5)}%`;
console.log(`${label}: ${perRequest.toFixed(1)} µs CPU per request (profiler on), ${n} requests`);
for (const [category, count] of [...byCategory].sort((a, b) => b[1] - a[1])) console.log(`${pct(count)}  ${category}`);
console.log('top frames (self time):');
for (const [frame, count] of [...byFrame].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.TOP ?? 25)))
  console.log(`${pct(count)}  ${frame}`);
