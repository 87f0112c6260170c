#!/usr/bin/env node
// The `tps` command. The sources are TypeScript run by Node's own type stripping (Node 24), so no build step.
import { restartOnProductRuntime } from '../src/cli/runtime.ts';

// Once, before anything else runs: the same process restarts with jemalloc preloaded and the
// product's V8 flags (src/cli/runtime.ts).
try {
  restartOnProductRuntime();
} catch (error) {
  console.error(`tps: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(2);
}
await import('../src/cli/main.ts');
