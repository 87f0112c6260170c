/**
 * One configuration per front-end (ip, port, protocol) on the edge, whatever the store holds: the
 * longest holder keeps a contested binding, the other is not served and is reported ERROR without
 * naming the holder. Unit cases first, then a real edge node over real sockets, with two tenants'
 * configurations on one port written past the store's unique key.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { arbitrateBindings } from './binding-arbiter.ts';
import { EdgeSupervisor } from './supervisor.ts';
import { openStore, type Store } from '../../store/index.ts';
import { bindingKey, type TrafficConfigRecord } from '../../store/traffic-configs.ts';
import { SecretBox } from '../../certs/secret-box.ts';
import { createMetrics } from '../../metrics.ts';
import { roundTrip } from '../../../test/support/round-trip.ts';
import { waitFor } from '../../../test/support/wait.ts';
import type { L4ProxyAttributes } from '@tps/model';
import { PERMISSIVE_ORIGIN_POLICY } from '../../../test/support/origin-guard.ts';

const FRONTEND = '127.0.9.41';
const ORIGINS = '127.0.9.42';

const l4 = (port: number, protocols: ('TCP' | 'UDP')[] = ['TCP'], originPort = 9, ip = FRONTEND): L4ProxyAttributes => ({
  frontend: { ipv4: ip, port },
  backend: { hosts: [{ address: ORIGINS, port: originPort }], deliveryMethod: 'LEAST_CONNECTIONS' },
  protocols,
  proxyProtocol: { enabled: false, version: 1 },
  threatIntelligence: { enabled: true },
  connectionLimits: { maxConnectionsPerSource: 512, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 1000 },
});

function record(fields: {
  id: string;
  port: number;
  revision: number;
  since?: number;
  createdAt?: string;
  protocols?: ('TCP' | 'UDP')[];
}): TrafficConfigRecord {
  const attributes = l4(fields.port, fields.protocols);
  const key = bindingKey({ ip: FRONTEND, port: fields.port, protocol: 'TCP' });
  return {
    id: fields.id,
    tenantId: `tenant-${fields.id}`,
    type: 'l4Proxy',
    attributes,
    revision: fields.revision,
    bindingSince: fields.since === undefined ? {} : { [key]: fields.since },
    createdAt: fields.createdAt ?? '2025-01-01T00:00:00.000Z',
    updatedAt: '2025-01-01T00:00:00.000Z',
  };
}

describe('binding arbitration', () => {
  it('serves every configuration when no binding is contested', () => {
    const records = [
      record({ id: 'a', port: 80, revision: 1 }),
      record({ id: 'b', port: 81, revision: 2 }),
      record({ id: 'c', port: 80, revision: 3, protocols: ['UDP'] }),
    ];
    const { served, refused } = arbitrateBindings(records);
    assert.deepEqual(
      served.map((r) => r.id),
      ['a', 'b', 'c'],
    );
    assert.equal(refused.size, 0);
  });

  it('gives a contested binding to the longest holder, whatever changed since, and names no one', () => {
    // b was changed after a (higher revision) but has held the port since revision 2; a claimed it at 7.
    const holder = record({ id: 'b', port: 443, revision: 9, since: 2 });
    const claimant = record({ id: 'a', port: 443, revision: 7, since: 7, createdAt: '2024-01-01T00:00:00.000Z' });
    for (const order of [
      [holder, claimant],
      [claimant, holder],
    ]) {
      const { served, refused } = arbitrateBindings(order);
      assert.deepEqual(
        served.map((r) => r.id),
        ['b'],
      );
      const detail = refused.get('a')!;
      assert.match(detail, /port 443\/TCP on 127\.0\.9\.41 is served by another configuration/);
      assert.ok(!detail.includes('tenant-b') && !detail.includes(' b '), 'the holder is not named');
    }
  });

  it('falls back to the revision, then creation time, then id: the same answer on every node', () => {
    // Rows from before binding_since: the configuration's revision stands in.
    assert.deepEqual(
      arbitrateBindings([record({ id: 'x', port: 80, revision: 5 }), record({ id: 'y', port: 80, revision: 4 })]).served.map((r) => r.id),
      ['y'],
    );
    const older = record({ id: 'z', port: 80, revision: 4, since: 4, createdAt: '2024-01-01T00:00:00.000Z' });
    const newer = record({ id: 'w', port: 80, revision: 4, since: 4, createdAt: '2024-06-01T00:00:00.000Z' });
    assert.deepEqual(
      arbitrateBindings([newer, older]).served.map((r) => r.id),
      ['z'],
    );
    const tieA = record({ id: 'aaa', port: 80, revision: 4, since: 4 });
    const tieB = record({ id: 'bbb', port: 80, revision: 4, since: 4 });
    assert.deepEqual(
      arbitrateBindings([tieB, tieA]).served.map((r) => r.id),
      ['aaa'],
    );
  });

  it('refuses a configuration whole when it loses one of its bindings', () => {
    const both = { ...record({ id: 'dual', port: 53, revision: 9, since: 9, protocols: ['TCP', 'UDP'] }) };
    const udpHolder = record({ id: 'udp', port: 53, revision: 1, protocols: ['UDP'] });
    udpHolder.bindingSince = { [bindingKey({ ip: FRONTEND, port: 53, protocol: 'UDP' })]: 1 };
    const { served, refused } = arbitrateBindings([both, udpHolder]);
    assert.deepEqual(
      served.map((r) => r.id),
      ['udp'],
    );
    assert.match(refused.get('dual')!, /port 53\/UDP/);
  });
});

describe('binding arbitration on a running edge node', () => {
  let dir: string;
  let store: Store;
  let edge: EdgeSupervisor;
  const origins: net.Server[] = [];

  /** A TCP origin that answers every chunk with its name. */
  async function namedOrigin(name: string): Promise<number> {
    const server = net.createServer((socket) => {
      socket.on('data', () => socket.end(name));
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, ORIGINS, resolve));
    origins.push(server);
    return (server.address() as net.AddressInfo).port;
  }

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-arbiter-'));
    store = await openStore({ dataDir: dir });
    edge = new EdgeSupervisor({
      store,
      secrets: SecretBox.fromSettings({ masterKey: undefined, dataDir: dir }),
      metrics: createMetrics(),
      logger: pino({ level: 'silent' }),
      nodeId: 'arbiter-node',
      location: 'TST',
      workers: 2,
      origins: { policy: PERMISSIVE_ORIGIN_POLICY, resolverServers: [] },
    });
    await edge.start();
  });
  after(async () => {
    await edge.stop();
    await store.close();
    for (const server of origins) server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("never lets a second configuration on a served port take a share of the holder's connections", async () => {
    const victim = await store.tenants.create('victim');
    const attacker = await store.tenants.create('attacker');
    const port = 20000 + Math.floor(Math.random() * 20000);
    const held = await store.trafficConfigs.create(victim.id, 'l4Proxy', l4(port, ['TCP'], await namedOrigin('victim')));
    const status = async (config: TrafficConfigRecord) => (await store.edgeStatus.statusOf([config])).get(config.id)!;
    await waitFor('the holder ACTIVE', async () => (await status(held)).status === 'ACTIVE');

    // A second configuration on the same binding, as a store fault (or a write past the unique key) would leave it.
    const id = crypto.randomUUID();
    const now = new Date().toISOString();
    const revision = Number(
      (await store.db.one<{ revision: number }>(
        'UPDATE store_revision SET revision = revision + 1 WHERE singleton = 1 RETURNING revision',
      ))!.revision,
    );
    await store.db.run(
      'INSERT INTO traffic_configs (id, tenant_id, type, attributes, revision, binding_since, created_at, updated_at) VALUES (?, ?, ?, ?, ?, NULL, ?, ?)',
      [
        id,
        attacker.id,
        'l4Proxy',
        JSON.stringify(l4(port, ['TCP'], await namedOrigin('attacker'))),
        revision,
        '2000-01-01T00:00:00.000Z',
        now,
      ],
    );
    const intruder = (await store.trafficConfigs.get(attacker.id, id))!;
    await waitFor('the intruder refused', async () => (await status(intruder)).status === 'ERROR');
    const detail = (await status(intruder)).statusDetail!;
    assert.match(detail, new RegExp(`port ${port}/TCP on 127\\.0\\.9\\.41 is served by another configuration`));
    assert.ok(!detail.includes(held.id) && !detail.includes(victim.id), 'the holder is not named');
    assert.equal((await status(held)).status, 'ACTIVE');
    assert.equal(edge.servingWorkers(intruder.id), 0);

    // Every connection reaches the holder's origin, on every worker.
    for (let i = 0; i < 40; i++) assert.equal(await roundTrip({ host: FRONTEND, port }, `hello ${i}`), 'victim');
  });
});
