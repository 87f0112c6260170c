import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { KernelBlocker } from './kernel-blocker.ts';
import { hasNetAdmin } from './nft.ts';
import type { NftRunner } from './nft.ts';

const quiet = { info() {}, warn() {}, error() {} };

function recordingRunner(fail: (script: string) => boolean = () => false): NftRunner & { scripts: string[] } {
  const scripts: string[] = [];
  return {
    scripts,
    apply: async (script) => {
      scripts.push(script);
      if (fail(script)) throw new Error('nft: No such file or directory');
    },
    run: async () => '{"nftables":[]}',
  };
}

const element = (source: string, port = 8080) => ({ family: 4 as const, protocol: 'tcp' as const, source, destination: '192.0.2.1', port });

describe('kernel blocker', () => {
  it('sends the sources of one tick in one nft transaction, never one per source', async () => {
    const runner = recordingRunner();
    const blocker = new KernelBlocker({ nft: runner, logger: quiet, flushIntervalMs: 100 });
    await blocker.start();
    const until = Date.now() + 60_000;
    for (let i = 1; i <= 200; i++) assert.equal(blocker.block(element(`10.0.${i >> 8}.${i & 255}`), until, 'rate-limit'), true);
    assert.equal(blocker.block(element('10.0.0.1'), until, 'rate-limit'), false, 'held already');
    await blocker.settled();
    assert.equal(runner.scripts.length, 2, 'the table, then one batch');
    assert.equal(runner.scripts[1]!.split('\n').filter((line) => line.startsWith('add element')).length, 200);
    assert.deepEqual(blocker.sizes(), { 'rate-limit': 200, 'threat-feed': 0 });
    await blocker.stop();
    assert.match(runner.scripts.at(-1)!, /delete table inet tps/);
  });

  it('replaces an element whose block got longer (delete and add in one transaction), and rebuilds the sets when a batch fails', async () => {
    let now = 1_000_000;
    const runner = recordingRunner((script) => script.includes('delete element') && script.includes('10.9.9.9'));
    const blocker = new KernelBlocker({ nft: runner, logger: quiet, flushIntervalMs: 0, now: () => now });
    await blocker.start();
    blocker.block(element('10.0.0.1'), now + 10_000, 'rate-limit');
    blocker.block(element('10.9.9.9'), now + 10_000, 'rate-limit');
    await blocker.settled();
    now += 1_000;
    assert.equal(blocker.block(element('10.0.0.1'), now + 60_000, 'threat-feed'), true);
    await blocker.settled();
    assert.match(
      runner.scripts.at(-1)!,
      /^delete element inet tps blocked_ipv4 \{ tcp \. 10\.0\.0\.1 \. 192\.0\.2\.1 \. 8080 \}\nadd element .* timeout 60000ms \}\n$/,
    );
    blocker.block(element('10.9.9.9'), now + 60_000, 'rate-limit');
    await blocker.settled();
    const rebuild = runner.scripts.at(-1)!;
    assert.match(rebuild, /^flush set inet tps blocked_ipv4\nflush set inet tps blocked_ipv6\n/);
    assert.equal(rebuild.split('\n').filter((line) => line.startsWith('add element')).length, 2);
    assert.equal(blocker.counts.failed, 1);
    await blocker.stop();
  });

  it('an element blocked again with a later end before its batch went out is one add, no delete', async () => {
    const runner = recordingRunner();
    const blocker = new KernelBlocker({ nft: runner, logger: quiet, flushIntervalMs: 50 });
    await blocker.start();
    const now = Date.now();
    blocker.block(element('10.0.0.1'), now + 10_000, 'rate-limit');
    assert.equal(blocker.block(element('10.0.0.1'), now + 20_000, 'rate-limit'), true);
    await blocker.settled();
    const batch = runner.scripts.at(-1)!;
    assert.doesNotMatch(batch, /delete element/);
    assert.equal(batch.split('\n').filter((line) => line.startsWith('add element')).length, 1);
    await blocker.stop();
  });

  it('creates the table again with what it holds when it is gone (a ruleset flush from outside)', async () => {
    let present = true;
    const runner = recordingRunner();
    runner.run = async () => {
      if (!present) throw new Error('Error: No such file or directory; list table inet tps');
      return '';
    };
    const blocker = new KernelBlocker({ nft: runner, logger: quiet, checkIntervalMs: 20 });
    await blocker.start();
    blocker.block(element('10.0.0.1'), Date.now() + 60_000, 'rate-limit');
    await blocker.settled();
    const before = runner.scripts.length;
    present = false;
    while (blocker.counts.recreated === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    await blocker.settled();
    const recreated = runner.scripts.slice(before).find((script) => script.includes('delete table inet tps'));
    assert.ok(recreated, runner.scripts.join('\n---\n'));
    assert.match(recreated, /add element inet tps blocked_ipv4 \{ tcp \. 10\.0\.0\.1 \. 192\.0\.2\.1 \. 8080 timeout \d+ms \}/);
    await blocker.stop();
  });

  it('reads CAP_NET_ADMIN (bit 12) from CapEff', () => {
    assert.equal(hasNetAdmin('CapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n'), true);
    assert.equal(hasNetAdmin('CapEff:\t0000000000000400\n'), false, 'CAP_NET_BIND_SERVICE only');
    assert.equal(hasNetAdmin('CapEff:\t0000000000001000\n'), true);
    assert.equal(hasNetAdmin(''), false);
  });
});
