/**
 * The allocator choice of `tps` (allocator.ts): which environment the launcher restarts with, and
 * that a real `tps` process runs on jemalloc by default and on glibc's malloc with TPS_MALLOC=system.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { allocatorEnvironment, jemallocPath } from './allocator.ts';

const BIN = new URL('../../bin/tps.js', import.meta.url).pathname;
const library = jemallocPath();

/** Runs `tps --help` with a preloaded probe that reports, from the process that runs main.ts, which malloc is mapped. */
function allocatorOfTps(env: NodeJS.ProcessEnv): string {
  const probe =
    "import fs from 'node:fs'; process.on('exit', () => process.stderr.write(fs.readFileSync('/proc/self/maps', 'utf8').includes('libjemalloc') ? 'MALLOC=jemalloc' : 'MALLOC=glibc'))";
  const run = spawnSync(process.execPath, [BIN, '--help'], {
    env: { ...process.env, ...env, NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(probe)}` },
    encoding: 'utf8',
  });
  assert.equal(run.status, 0, run.stderr);
  return /MALLOC=(\w+)/.exec(run.stderr)?.[1] ?? 'none';
}

describe('allocator of the tps process', () => {
  it('adds jemalloc to LD_PRELOAD unless it is there, TPS_MALLOC=system, or it is not installed', {
    skip: library === undefined && 'libjemalloc2 is not installed',
  }, () => {
    assert.equal(allocatorEnvironment({})?.LD_PRELOAD, library);
    assert.equal(allocatorEnvironment({ TPS_MALLOC: 'jemalloc', LD_PRELOAD: '/x/other.so' })?.LD_PRELOAD, `${library}:/x/other.so`);
    assert.equal(allocatorEnvironment({ LD_PRELOAD: library }), undefined);
    assert.equal(allocatorEnvironment({ TPS_MALLOC: 'system' }), undefined);
  });

  it('refuses an unknown TPS_MALLOC', () => {
    assert.throws(() => allocatorEnvironment({ TPS_MALLOC: 'tcmalloc' }), /TPS_MALLOC must be jemalloc or system/);
  });

  it('runs tps on jemalloc by default, on glibc malloc with TPS_MALLOC=system', {
    skip: library === undefined && 'libjemalloc2 is not installed',
    timeout: 30_000,
  }, () => {
    assert.equal(allocatorOfTps({ TPS_MALLOC: '', LD_PRELOAD: '' }), 'jemalloc');
    assert.equal(allocatorOfTps({ TPS_MALLOC: 'system', LD_PRELOAD: '' }), 'glibc');
  });
});
