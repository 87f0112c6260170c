/**
 * The process's memory allocator: jemalloc (Debian's libjemalloc2) instead of glibc's malloc,
 * preloaded when `tps` starts (bin/tps.js re-executes itself once with LD_PRELOAD: runtime.ts).
 *
 * Why: ModSecurity v3 allocates and frees small strings and vectors for every variable of every
 * rule it evaluates (ModSecurity issue #1731, "Reduce dynamic memory allocations in hot path
 * code"); with jemalloc the same CRS transactions cost 15-25 % less CPU on this machine
 * (bench/waf-engine, docs/benchmarks.md). Node and V8 run unchanged on it (V8's heap is its own;
 * Buffers and native objects go through malloc). It is a preload, not a link-time choice, because
 * libmodsecurity calls malloc through the dynamic linker like everything else in the process.
 *
 * TPS_MALLOC: `jemalloc` (default: used when installed, else glibc's malloc), `system` (glibc's).
 */
import fs from 'node:fs';

export const ALLOCATOR_VARIABLE = 'TPS_MALLOC';

const MULTIARCH: Partial<Record<NodeJS.Architecture, string>> = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' };

/** Where Debian puts libjemalloc.so.2 for this architecture, if it is there. */
export function jemallocPath(): string | undefined {
  const triplet = MULTIARCH[process.arch];
  if (process.platform !== 'linux' || triplet === undefined) return undefined;
  const file = `/usr/lib/${triplet}/libjemalloc.so.2`;
  return fs.existsSync(file) ? file : undefined;
}

/**
 * The environment to start a `tps` process with: `env` with jemalloc added to LD_PRELOAD, or
 * `undefined` when nothing is to change (already preloaded, `system` chosen, or jemalloc not
 * installed and not asked for by name). Throws on an unknown TPS_MALLOC or an explicit `jemalloc`
 * that is not installed.
 */
export function allocatorEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv | undefined {
  const choice = env[ALLOCATOR_VARIABLE] ?? '';
  if (choice !== '' && choice !== 'jemalloc' && choice !== 'system') {
    throw new Error(`${ALLOCATOR_VARIABLE} must be jemalloc or system, got ${JSON.stringify(choice)}`);
  }
  if (choice === 'system') return undefined;
  const library = jemallocPath();
  if (library === undefined) {
    if (choice === 'jemalloc')
      throw new Error(`${ALLOCATOR_VARIABLE}=jemalloc but libjemalloc.so.2 is not installed (Debian package libjemalloc2)`);
    return undefined;
  }
  const preload = env.LD_PRELOAD ?? '';
  if (preload.split(/[\s:]+/).includes(library)) return undefined;
  return { ...env, LD_PRELOAD: preload === '' ? library : `${library}:${preload}` };
}
