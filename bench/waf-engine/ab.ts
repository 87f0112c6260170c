/**
 * Paired A/B of the compiled engine: another checkout's engine (BASE, e.g. a `git worktree` of the
 * commit before a change) and this tree's, loaded side by side in ONE process, alternating rounds
 * on the same request. Prints each side's median CPU µs per request and the median of the
 * per-round ratios (this tree / BASE). On this noisy machine separate runs move by 5–10 %; the
 * paired ratio by about 2 %, which is what a change of a few percent needs.
 *
 *   git worktree add /tmp/base HEAD~1 && ln -s "$PWD/node_modules" /tmp/base/node_modules
 *   BASE=/tmp/base node bench/waf-engine/ab.ts
 *   BASE=/tmp/base SCENARIO=post PARANOIA=4 ROUNDS=21 N=150 node bench/waf-engine/ab.ts
 *
 * REVERSE=1: this tree loaded and measured first (run both orders: the first one loaded can differ).
 * SCENARIO: get (default), post (1 KB form), json (10 KB), attack, minimal (requests.ts EXTRA_SCENARIOS). RESPONSE=1 adds the response
 * phases (a 57-byte text/plain answer). BUDGET=250 runs each inspection under the cooperative
 * budget, as the engine's threads do. Same requests as bench/waf-engine/run.ts.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { WafRequest } from '@tps/waf';
import type { CompiledInspector } from '@tps/waf';
import { BENCH_RESPONSE, scenarioOf, settingsFromEnv } from './requests.ts';

const base = process.env.BASE;
if (!base) throw new Error('BASE=<path of the other checkout> is required');

/** The engine's inspector in a checkout: in @tps/waf, or where it was before the packages (src/edge/http/waf/compiled/). */
async function load(root: string): Promise<CompiledInspector> {
  const file = ['packages/waf/src/inspector.ts', 'src/edge/http/waf/compiled/inspector.ts']
    .map((f) => resolve(root, f))
    .find((f) => existsSync(f));
  if (file === undefined) throw new Error(`no compiled engine in ${root}`);
  const module = (await import(pathToFileURL(file).href)) as typeof import('@tps/waf');
  // (a checkout from before the budget ignores the second argument)
  return module.CompiledInspector.load({}, budgetMs);
}

/** BUDGET=<ms>: each inspection with the cooperative budget on, as the engine's threads run it (250 by default there). */
const budgetMs = Number(process.env.BUDGET ?? 0);
const scenario = scenarioOf(process.env.SCENARIO);
const settings = settingsFromEnv();
const rounds = Number(process.env.ROUNDS ?? 21);
const perRound = Number(process.env.N ?? 400);
const response = BENCH_RESPONSE;

function exchange(inspector: CompiledInspector, request: WafRequest): void {
  if (!process.env.RESPONSE) {
    inspector.inspectRequest(request, settings, false);
    return;
  }
  const { open } = inspector.inspectRequest(request, settings, true);
  if (open) inspector.inspectResponse(open, response);
}

function cpuMicrosPerRequest(inspector: CompiledInspector, n: number): number {
  const start = process.cpuUsage();
  for (let i = 0; i < n; i++) exchange(inspector, scenario.request);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[values.length >> 1]!;

// REVERSE=1: this tree is loaded first and measured first in each round (the other load order)
const reverse = process.env.REVERSE === '1';
const current = reverse ? await load(process.cwd()) : undefined;
const old = await load(base);
const currentInspector = current ?? (await load(process.cwd()));
if (process.env.WARM) {
  (old as { warmUp?: () => void }).warmUp?.();
  currentInspector.warmUp();
}
// both tiered up to their steady state first (run.ts: WARMUP_MS)
const warmEnd = performance.now() + Number(process.env.WARMUP_MS ?? 6000);
while (performance.now() < warmEnd) {
  cpuMicrosPerRequest(old, 300);
  cpuMicrosPerRequest(currentInspector, 300);
}
const a: number[] = [];
const b: number[] = [];
const ratios: number[] = [];
for (let r = 0; r < rounds; r++) {
  const y0 = reverse ? cpuMicrosPerRequest(currentInspector, perRound) : 0;
  const x = cpuMicrosPerRequest(old, perRound);
  const y = reverse ? y0 : cpuMicrosPerRequest(currentInspector, perRound);
  a.push(x);
  b.push(y);
  ratios.push(y / x);
}
process.stdout.write(
  `${scenario.name} PL${settings.paranoiaLevel}${process.env.RESPONSE ? ' + response' : ''}: BASE ${median(a).toFixed(1)} µs, this tree ${median(b).toFixed(1)} µs, ` +
    `this/BASE median ratio ${median(ratios).toFixed(3)} (${rounds} rounds of ${perRound})\n`,
);
