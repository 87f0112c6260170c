/**
 * The runtime the `tps` process runs on: jemalloc (allocator.ts) and the V8 flags below. bin/tps.js
 * restarts itself once, first thing, with both (`process.execve` keeps the pid, arguments, stdio
 * and signal handling); V8 flags go on the command line because V8 reads them at start-up.
 *
 * `--no-allocation-site-pretenuring`: V8 watches which allocation sites' objects survive a young
 * generation GC and, above 85 %, allocates that site's objects straight in the old generation.
 * A proxy keeps every exchange's objects (the WAF transaction above all: its values,
 * transformation results and TX variables, tens of KB) alive while the origin answers, so V8
 * tenures the WAF's and the proxy's per-request allocation sites; from then on every request fills the old
 * generation, and its young objects referenced from dead old ones survive the scavenges too,
 * until the next mark-compact (one every few hundred requests). Measured with 16 exchanges held
 * open at a time, like a loaded proxy (docs/benchmarks.md): GC pauses 332 -> 92 ms per 15,000
 * exchanges and 250 -> 203 µs of CPU per exchange. Per-request objects then die young, as they
 * should; long-lived state (rule sets, routes, caches) is promoted the ordinary way.
 *
 * `--max-semi-space-size=8 --initial-old-space-size=128`: V8 starts marking the old generation as
 * soon as the room left under its limit is smaller than the young generation, whatever the reason
 * for the old generation's growth. With V8's default young generation (tens of MB) and a small live
 * old generation (the rule set: ~15 MB), the few KB per request that exchanges held open promote
 * were enough: the WAF thread ran a mark-compact for about every scavenge (70-100 in 15 s of
 * load). A young generation of 8 MB semi-spaces and a first old-generation limit of 128 MB leave
 * the old generation room: mark-compacts in the WAF thread went to a handful, the GC helper
 * threads' CPU per proxied GET from ~30 to ~8 µs, the process' CPU per GET down ~12 %, and its
 * RSS under load from ~490 to ~250 MB (the young generation was most of it). Measured behind the
 * proxy (bench/waf, docs/benchmarks.md); the engine alone (bench/waf-engine) does not change.
 */
import { allocatorEnvironment } from './allocator.ts';

export const PRODUCT_V8_FLAGS: readonly string[] = [
  '--no-allocation-site-pretenuring',
  '--max-semi-space-size=8',
  '--initial-old-space-size=128',
];

/** `execArgv` with the product's V8 flags first, or undefined when it has them all. */
export function productExecArgv(execArgv: readonly string[]): string[] | undefined {
  const missing = PRODUCT_V8_FLAGS.filter((flag) => !execArgv.includes(flag));
  return missing.length === 0 ? undefined : [...missing, ...execArgv];
}

/**
 * Restarts this process on the product's runtime unless it already runs on it (then returns).
 * Throws as `allocatorEnvironment` does (an unknown or unavailable TPS_MALLOC).
 */
export function restartOnProductRuntime(): void {
  const env = allocatorEnvironment(process.env);
  const execArgv = productExecArgv(process.execArgv);
  if (env === undefined && execArgv === undefined) return;
  if (!process.execve) return;
  process.execve(process.execPath, [process.execPath, ...(execArgv ?? process.execArgv), ...process.argv.slice(1)], env ?? process.env);
}
