/**
 * The edge node keeps serving when one of its proxy workers dies, starts that worker again with
 * the configuration it had, and reports the configuration ACTIVE once every worker serves it.
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
import { createMetrics } from '../../metrics.ts';
import { EdgeSupervisor } from './supervisor.ts';
import { roundTrip } from '../../../test/support/round-trip.ts';
import { waitFor } from '../../../test/support/wait.ts';
import type { L4ProxyAttributes } from '@tps/model';
import { PERMISSIVE_ORIGIN_POLICY } from '../../../test/support/origin-guard.ts';
import { ThreadKeeper } from '../../../test/support/threads.ts';

/** The edge's threads, to end one as a crash would. */
const threads = new ThreadKeeper();
const FRONTEND = '127.0.0.41';

async function echoOrigin(): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.on('data', (chunk) => socket.write(chunk));
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.42', resolve));
  return server;
}

describe('edge supervisor', () => {
  let dir: string;
  let store: Store;
  let edge: EdgeSupervisor;
  let origin: net.Server;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-edge-'));
    store = await openStore({ dataDir: dir });
    origin = await echoOrigin();
    edge = new EdgeSupervisor({
      store,
      secrets: SecretBox.fromSettings({ masterKey: undefined, dataDir: dir }),
      metrics: createMetrics(),
      logger: pino({ level: 'silent' }),
      nodeId: 'test-node',
      location: 'TST',
      workers: 2,
      // Test origins are on loopback, which the product's origin policy refuses by default.
      origins: { policy: PERMISSIVE_ORIGIN_POLICY, resolverServers: [] },
      startThread: threads.start,
    });
    await edge.start();
  });
  after(async () => {
    await edge.stop();
    await store.close();
    origin.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('keeps serving through the crash of a worker and restarts it with its configuration', async () => {
    const tenant = await store.tenants.create('t');
    const port = 20000 + Math.floor(Math.random() * 20000);
    const attributes = {
      frontend: { ipv4: FRONTEND, port },
      backend: {
        hosts: [{ address: '127.0.0.42', port: (origin.address() as net.AddressInfo).port }],
        deliveryMethod: 'LEAST_CONNECTIONS',
      },
      protocols: ['TCP'],
      proxyProtocol: { enabled: false, version: 1 },
      threatIntelligence: { enabled: true },
      connectionLimits: { maxConnectionsPerSource: 512, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 1000 },
    } satisfies L4ProxyAttributes;
    const config = await store.trafficConfigs.create(tenant.id, 'l4Proxy', attributes);
    const status = async () => (await store.edgeStatus.statusOf([config])).get(config.id)!.status;
    await waitFor('ACTIVE', async () => (await status()) === 'ACTIVE');
    assert.equal(edge.servingWorkers(config.id), 2);
    assert.equal(await roundTrip({ host: FRONTEND, port }, 'before'), 'before');

    await threads.crash('tps-edge-0');
    // The other worker holds the port too: every connection until the restart is still served.
    // (Connections the crashed worker had accepted die with it; with net.ipv4.tcp_migrate_req=1 the
    // kernel hands those still in its accept queue to the other listener.)
    for (let i = 0; i < 20; i++) assert.equal(await roundTrip({ host: FRONTEND, port }, `during ${i}`), `during ${i}`);
    // The node still serves the configuration (the other worker): /healthz gives the restart its grace.
    assert.equal(edge.health().ok, true, JSON.stringify(edge.health()));

    await waitFor('the restarted worker to serve', async () => edge.servingWorkers(config.id) === 2);
    assert.equal(await status(), 'ACTIVE');
    for (let i = 0; i < 20; i++) assert.equal(await roundTrip({ host: FRONTEND, port }, `after ${i}`), `after ${i}`);
    assert.equal((await store.trafficConfigs.listAll()).length, 1, 'no configuration was lost');
    const health = edge.health();
    assert.deepEqual(
      { ok: health.ok, configurations: health.configurations, notServed: health.notServed },
      { ok: true, configurations: 1, notServed: [] },
    );
    // No threat feed on this node: the proxy refuses no source, and says so.
    assert.deepEqual(
      health.warnings.map((warning) => [warning.code, warning.configurations]),
      [['NO_THREAT_FEED', [config.id]]],
    );
    assert.match(
      (await store.edgeStatus.statusOf([config])).get(config.id)!.statusDetail ?? '',
      /^test-node: threatIntelligence is enabled but this edge node has no threat feed/,
    );
  });
});
