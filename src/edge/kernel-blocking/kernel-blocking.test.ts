import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { KernelBlocking, elementsFor } from './kernel-blocking.ts';
import type { NftRunner } from './nft.ts';

function logger() {
  const lines: string[] = [];
  const log = (_details: object, message: string) => void lines.push(message);
  return { lines, info: log, warn: log, error: log };
}

function runner(): NftRunner & { scripts: string[] } {
  const scripts: string[] = [];
  return {
    scripts,
    apply: async (script) => void scripts.push(script),
    run: async () => JSON.stringify({ nftables: [{ counter: { name: 'dropped_ipv4', packets: 7 } }] }),
  };
}

const start = async (mode: 'auto' | 'nftables' | 'off', netAdmin: boolean, nft: string | undefined) => {
  const log = logger();
  const nftRunner = runner();
  const registry = new Registry();
  const blocking = new KernelBlocking({
    mode,
    escalationFactor: 4,
    logger: log,
    registry,
    probe: { netAdmin: () => netAdmin, nft: () => nft },
    runner: () => nftRunner,
  });
  return { blocking, log, nftRunner, registry, started: blocking.start() };
};

describe('kernel blocking modes', () => {
  it('auto without CAP_NET_ADMIN or nft: off, with a log line and a /healthz warning', async () => {
    for (const [netAdmin, nft, why] of [
      [false, '/usr/sbin/nft', /CAP_NET_ADMIN/],
      [true, undefined, /nftables/],
    ] as const) {
      const { blocking, log, nftRunner, started } = await start('auto', netAdmin, nft);
      await started;
      assert.equal(blocking.active, false);
      assert.equal(blocking.warning?.code, 'KERNEL_BLOCKING_UNAVAILABLE');
      assert.match(blocking.warning?.detail ?? '', why);
      assert.ok(log.lines.some((line) => line.startsWith('kernel blocking off')));
      assert.deepEqual(nftRunner.scripts, [], 'nothing asked of the kernel');
    }
  });

  it('nftables: the start fails naming what is missing; off: nothing probed, no warning', async () => {
    await assert.rejects(
      (await start('nftables', false, '/usr/sbin/nft')).started,
      /TPS_KERNEL_BLOCKING=nftables: the process lacks CAP_NET_ADMIN/,
    );
    const off = await start('off', true, '/usr/sbin/nft');
    await off.started;
    assert.equal(off.blocking.active, false);
    assert.equal(off.blocking.warning, undefined);
  });

  it('escalates past the bar, once, to the proxy front end of the source family, and counts it', async () => {
    const { blocking, nftRunner, registry, started } = await start('auto', true, '/usr/sbin/nft');
    await started;
    assert.equal(blocking.active, true);
    const target = {
      ipv4: '192.0.2.1',
      ipv6: '2001:db8::1',
      port: 443,
      protocols: ['tcp'] as const,
      thresholds: [{ requests: 5, periodSeconds: 60 }],
    };
    const report = { proxyId: 'p', source: '198.51.100.7', reason: 'rate-limit' as const, count: 20, blockedUntil: Date.now() + 30_000 };
    assert.deepEqual(
      blocking.onRefusals([report], () => target),
      [],
      'at 4 x 5, not over it',
    );
    assert.deepEqual(blocking.onRefusals([{ ...report, count: 1 }], () => target).length, 1);
    assert.deepEqual(
      blocking.onRefusals([{ ...report, count: 100 }], () => target),
      [],
      'once per block',
    );
    await blocking.settled();
    assert.match(
      nftRunner.scripts.at(-1)!,
      /^add element inet tps blocked_ipv4 \{ tcp \. 198\.51\.100\.7 \. 192\.0\.2\.1 \. 443 timeout \d+ms \}\n$/,
    );
    const metrics = await registry.metrics();
    assert.match(metrics, /tps_edge_kernel_escalations_total\{reason="rate-limit"\} 1/);
    assert.match(metrics, /tps_edge_kernel_blocked_sources\{reason="rate-limit"\} 1/);
    assert.match(metrics, /tps_edge_kernel_dropped_packets_total\{family="ipv4"\} 7/);
    await blocking.stop();
    assert.match(nftRunner.scripts.at(-1)!, /delete table inet tps/);
  });

  it('maps a source to the front end of its family, a wildcard front end to /0, every protocol of a layer 4 proxy', () => {
    const target = { ipv4: '0.0.0.0', ipv6: '2001:db8::1', port: 53, protocols: ['tcp', 'udp'] as const, thresholds: [] };
    assert.deepEqual(
      elementsFor('2001:db8:5:6:0:0:0:0/64', target).map((element) => [element.protocol, element.destination]),
      [
        ['tcp', '2001:db8::1'],
        ['udp', '2001:db8::1'],
      ],
    );
    assert.deepEqual(elementsFor('192.0.2.9', target)[0]?.destination, '0.0.0.0/0');
    assert.deepEqual(elementsFor('192.0.2.9', { ...target, ipv4: undefined }), []);
  });
});
