/**
 * What the compiled engine allocates per transaction: bytes per request (V8's heap statistics,
 * every young object counted, with the scavenger's work in between), scavenges per 1,000 requests,
 * and the allocation sites (the inspector's sampling heap profiler with the objects minor and
 * major GCs collected) grouped by frame, largest first.
 *
 *   SCENARIO=get PARANOIA=1 node bench/waf-engine/garbage.ts
 *
 * SCENARIO: get, post, json, attack (bench/waf-engine/requests.ts); RESPONSE=0 leaves out the
 * response phases. N requests measured (20,000) after WARMUP_MS (3000). TOP frames (25).
 */
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { Session } from 'node:inspector/promises';
import { warmedExchange } from './warm-exchange.ts';

const { exchange, label } = warmedExchange(3000);
const n = Number(process.env.N ?? 20_000);

let scavenges = 0;
const observer = new PerformanceObserver((list) => {
  for (const entry of list.getEntries())
    if ((entry as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) scavenges++;
});
observer.observe({ entryTypes: ['gc'] });

const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
await session.post('HeapProfiler.startSampling', {
  samplingInterval: 512,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
});
for (let i = 0; i < n; i++) exchange();
const { profile } = await session.post('HeapProfiler.stopSampling');
await new Promise((r) => setTimeout(r, 50));
observer.disconnect();

interface Node {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: Node[];
}
const byFrame = new Map<string, number>();
let total = 0;
const frameName = (node: Node): string => {
  const { functionName, url, lineNumber } = node.callFrame;
  return `${functionName || '(anonymous)'} ${url.replace(/^.*\/(packages|src|node_modules|bench)\//, '$1/')}:${lineNumber + 1}`;
};
const walk = (node: Node, caller: string): void => {
  if (node.selfSize > 0) {
    // a built-in (Map.set, Array.push ...) is named with its caller
    const key = node.callFrame.url === '' ? `${frameName(node)} < ${caller}` : frameName(node);
    byFrame.set(key, (byFrame.get(key) ?? 0) + node.selfSize);
    total += node.selfSize;
  }
  for (const child of node.children) walk(child, frameName(node));
};
walk(profile.head as unknown as Node, '');
console.log(
  `${label}: ${(total / n / 1024).toFixed(1)} KB sampled per request, ${((scavenges * 1000) / n).toFixed(1)} scavenges per 1,000 requests (${n} requests)`,
);
for (const [frame, size] of [...byFrame].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.TOP ?? 25)))
  console.log(`${(size / n).toFixed(0).padStart(7)} B  ${frame}`);
