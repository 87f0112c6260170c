#!/usr/bin/env node
// The `tps` command. The sources are TypeScript run by Node's own type stripping (Node 24), so no build step.
import { allocatorEnvironment } from '../src/cli/allocator.ts';

let env;
try {
  env = allocatorEnvironment(process.env);
} catch (error) {
  console.error(`tps: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(2);
}
// Once, before anything else runs: the same process (pid, signals, stdio) restarts with jemalloc preloaded.
if (env !== undefined) process.execve(process.execPath, [process.execPath, ...process.execArgv, ...process.argv.slice(1)], env);
await import('../src/cli/main.ts');
