#!/usr/bin/env node
// The `tps` command. The sources are TypeScript run by Node's own type stripping (Node 24), so no build step.
import { restartOnAllocator } from '../src/cli/allocator.ts';

// Once, before anything else runs: the same process restarts with jemalloc preloaded (src/cli/allocator.ts).
try {
  restartOnAllocator();
} catch (error) {
  console.error(`tps: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(2);
}
await import('../src/cli/main.ts');
