/**
 * Our side of a benchmark runs on the allocator `tps` runs on (src/cli/allocator.ts: jemalloc when
 * installed, TPS_MALLOC=system for glibc's malloc), so that the numbers are the product's.
 */
import fs from 'node:fs';
import { allocatorEnvironment } from '../../src/cli/allocator.ts';

/** The environment for a child process that runs our side. */
export function productEnvironment(): NodeJS.ProcessEnv {
  return allocatorEnvironment(process.env) ?? process.env;
}

/** Which malloc a process has mapped: "jemalloc" or "glibc". */
export function mallocOf(pid: number | 'self'): string {
  try {
    return fs.readFileSync(`/proc/${pid}/maps`, 'utf8').includes('libjemalloc') ? 'jemalloc' : 'glibc malloc';
  } catch {
    return 'unknown malloc';
  }
}
