/**
 * The edge node reads and builds its threat feed once, in the supervisor's feed thread, and every
 * proxy worker refuses the listed clients from that one set: a changed source reaches all workers,
 * and a worker started again after a crash has the current set.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { openStore, type Store } from '../../store/index.ts';
import { SecretBox } from '../../certs/secret-box.ts';
import { createMetrics, type Metrics } from '../../metrics.ts';
import { freePort } from '../../../test/support/ports.ts';
import { EdgeSupervisor } from './supervisor.ts';
import { ThreatFeedHost, type ThreatFeedSet } from './threat-feed-host.ts';
import { IpSet } from '../../net/ip-set.ts';
import { roundTrip } from '../../../test/support/round-trip.ts';
import { waitFor } from '../../../test/support/wait.ts';
import type { L4ProxyAttributes } from '@tps/model';
import { PERMISSIVE_ORIGIN_POLICY } from '../../../test/support/origin-guard.ts';
import { ThreadKeeper } from '../../../test/support/threads.ts';

/** The edge's threads, to end one as a crash would. */
const threads = new ThreadKeeper();
const FRONTEND = '127.0.0.71';
const ORIGIN = '127.0.0.72';
const FIRST_LISTED = '127.0.0.73';
const LATER_LISTED = '127.0.0.74';
/** Enough connections that both workers take some (the kernel spreads them by address and port). */
const ATTEMPTS = 24;

/** What `ATTEMPTS` connections from `client` got, counted: e.g. { CLOSED: 24 }. */
async function outcomes(port: number, client: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (let i = 0; i < ATTEMPTS; i++) {
    const reply = await roundTrip({ host: FRONTEND, port, localAddress: client }, `hi ${i}`);
    const key = reply === `hi ${i}` ? 'ECHOED' : reply;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

describe('edge node threat feed', { timeout: 60_000 }, () => {
  let dir: string;
  let feedFile: string;
  let store: Store;
  let edge: EdgeSupervisor;
  let metrics: Metrics;
  let origin: net.Server;
  const originClients: string[] = [];
  let port: number;
  let configId: string;

  /** Replaces the feed file whole (rename), so the feed thread never reads it half written. */
  const writeFeed = (text: string) => {
    fs.writeFileSync(`${feedFile}.tmp`, text);
    fs.renameSync(`${feedFile}.tmp`, feedFile);
  };

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-edge-feed-'));
    feedFile = path.join(dir, 'feed.netset');
    writeFeed(`# test feed\n${FIRST_LISTED}/32\n2001:db8::/32\n`);
    store = await openStore({ dataDir: dir });
    origin = net.createServer((socket) => {
      originClients.push(socket.remoteAddress ?? '');
      socket.on('data', (chunk) => socket.write(chunk));
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    metrics = createMetrics();
    edge = new EdgeSupervisor({
      store,
      secrets: SecretBox.fromSettings({ masterKey: undefined, dataDir: dir }),
      metrics,
      logger: pino({ level: 'silent' }),
      nodeId: 'feed-node',
      location: 'TST',
      workers: 2,
      threatFeeds: [feedFile],
      // Short, so that a changed file is read again soon (the feed thread re-reads it on its timer).
      threatFeedRefreshMs: 100,
      // Test origins are on loopback, which the product's origin policy refuses by default.
      origins: { policy: PERMISSIVE_ORIGIN_POLICY, resolverServers: [] },
      startThread: threads.start,
    });
    await edge.start();
    const tenant = await store.tenants.create('t');
    port = await freePort(FRONTEND);
    const attributes = {
      frontend: { ipv4: FRONTEND, port },
      backend: { hosts: [{ address: ORIGIN, port: (origin.address() as net.AddressInfo).port }], deliveryMethod: 'LEAST_CONNECTIONS' },
      protocols: ['TCP'],
      proxyProtocol: { enabled: false, version: 1 },
      threatIntelligence: { enabled: true },
      connectionLimits: { maxConnectionsPerSource: 512, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 1000 },
    } satisfies L4ProxyAttributes;
    configId = (await store.trafficConfigs.create(tenant.id, 'l4Proxy', attributes)).id;
    await waitFor('both workers to serve the proxy', async () => edge.servingWorkers(configId) === 2);
  });
  after(async () => {
    await edge.stop();
    await store.close();
    origin.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('refuses the clients of the first set in every worker, then those of a changed source', async () => {
    await waitFor('both workers to use the feed set', async () => edge.threatFeedWorkers() === 2);
    assert.deepEqual(await outcomes(port, FIRST_LISTED), { CLOSED: ATTEMPTS });
    assert.deepEqual(await outcomes(port, LATER_LISTED), { ECHOED: ATTEMPTS });
    assert.ok(!originClients.includes(FIRST_LISTED), 'the origin never saw a listed client');

    writeFeed(`# test feed, changed\n${LATER_LISTED}/32\n`);
    await waitFor(
      'a refusal of the newly listed client',
      async () => (await roundTrip({ host: FRONTEND, port, localAddress: LATER_LISTED }, 'probe')) === 'CLOSED',
    );
    // The ack of every worker, and what real connections get from both of them.
    await waitFor('both workers to use the new set', async () => edge.threatFeedWorkers() === 2);
    assert.deepEqual(await outcomes(port, LATER_LISTED), { CLOSED: ATTEMPTS });
    assert.deepEqual(await outcomes(port, FIRST_LISTED), { ECHOED: ATTEMPTS }, 'no longer listed');
  });

  it('tells the metrics how big the set is and whether each source could be read', async () => {
    await waitFor('a feed report', async () => (await metrics.registry.metrics()).includes('tps_edge_threat_feed_source_up{'));
    const text = await metrics.registry.metrics();
    assert.ok(text.includes(`tps_edge_threat_feed_source_up{source="${feedFile}"} 1`), 'the source is up');
    assert.match(text, /tps_edge_threat_feed_prefixes [1-9]/);
    assert.match(text, /tps_edge_threat_feed_source_entries\{source="[^"]+"\} [1-9]/);
  });

  it('gives a worker started again after a crash the current set', async () => {
    await waitFor('both workers to use the feed set', async () => edge.threatFeedWorkers() === 2);
    await threads.crash('tps-edge-0');
    // Gone (its slot empty until it is started again, 200 ms later at the earliest), then back.
    await waitFor('the crash to be seen', async () => edge.servingWorkers(configId) < 2, { intervalMs: 5 });
    await waitFor('the restarted worker to serve', async () => edge.servingWorkers(configId) === 2);
    assert.equal(edge.threatFeedWorkers(), 2, 'the restarted worker had the set from its start');
    assert.deepEqual(await outcomes(port, LATER_LISTED), { CLOSED: ATTEMPTS });
    assert.deepEqual(await outcomes(port, FIRST_LISTED), { ECHOED: ATTEMPTS });
  });
});

describe('ThreatFeedHost', { timeout: 30_000 }, () => {
  it('starts a feed thread that died again; the set given out stays in use meanwhile', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-feed-host-'));
    const file = path.join(dir, 'feed.txt');
    fs.writeFileSync(file, '192.0.2.0/24\n');
    const given: ThreatFeedSet[] = [];
    const feedThreads = new ThreadKeeper();
    const host = new ThreatFeedHost({
      sources: [file],
      refreshIntervalMs: 0,
      logger: pino({ level: 'silent' }),
      onSet: (current) => given.push(current),
      startThread: feedThreads.start,
    });
    try {
      host.start();
      await waitFor('the first set', async () => given.length === 1);
      const first = IpSet.fromShared(given[0]!.set);
      assert.ok(first.has('192.0.2.7') && first.has('::ffff:192.0.2.7') && !first.has('192.0.3.1'));
      assert.equal(host.report?.sources[0]?.ok, true);

      await feedThreads.crash('tps-threat-feed');
      await waitFor('a set from the restarted thread', async () => given.length === 2, { timeoutMs: 10_000 });
      assert.ok(first.has('192.0.2.7'), 'the memory outlives the thread that made it');
      assert.ok(given[1]!.generation > given[0]!.generation, 'generations keep growing across restarts');
      assert.equal(host.current, given[1]);
      assert.ok(IpSet.fromShared(given[1]!.set).has('192.0.2.7'));
    } finally {
      await host.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
