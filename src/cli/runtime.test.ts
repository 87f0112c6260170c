/**
 * The runtime of `tps` (runtime.ts): the V8 flags the launcher restarts with, and that a real `tps`
 * process runs with them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { PRODUCT_V8_FLAGS, productExecArgv } from './runtime.ts';

const BIN = new URL('../../bin/tps.js', import.meta.url).pathname;

describe('runtime of the tps process', () => {
  it('puts the missing V8 flags before the other node options, and changes nothing when they are there', () => {
    assert.deepEqual(productExecArgv(['--enable-source-maps']), [...PRODUCT_V8_FLAGS, '--enable-source-maps']);
    assert.equal(productExecArgv([...PRODUCT_V8_FLAGS]), undefined);
  });

  it('runs tps with those flags', { timeout: 30_000 }, () => {
    // reports, from the process that runs main.ts, the node options it was started with
    const probe = "process.on('exit', () => process.stderr.write('EXECARGV=' + JSON.stringify(process.execArgv)))";
    const run = spawnSync(process.execPath, [BIN, '--help'], {
      env: { ...process.env, NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(probe)}` },
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stderr);
    const execArgv = JSON.parse(/EXECARGV=(.*)/.exec(run.stderr)?.[1] ?? '[]') as string[];
    for (const flag of PRODUCT_V8_FLAGS) assert.ok(execArgv.includes(flag), `${flag}: ${run.stderr}`);
  });
});
