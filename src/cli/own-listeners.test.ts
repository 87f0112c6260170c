import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { databaseHosts, originPolicySettings, ownHosts, redisHost } from './own-listeners.ts';

describe("the service's own addresses, refused as origins", () => {
  it('reads the database hosts as node-postgres does', () => {
    assert.deepEqual(databaseHosts('postgres://tps:secret@10.0.0.5:5432/tps', {}), ['10.0.0.5']);
    assert.deepEqual(databaseHosts('postgresql://tps@[fd00::5]:5432/tps', {}), ['fd00::5']);
    assert.deepEqual(databaseHosts('postgres://tps@db.internal/tps?host=10.0.0.6', {}), ['db.internal', '10.0.0.6']);
    assert.deepEqual(databaseHosts('postgres:///tps', { PGHOST: '10.0.0.7' }), ['10.0.0.7']);
    assert.deepEqual(databaseHosts('postgres:///tps', {}), ['localhost']);
    assert.deepEqual(databaseHosts('postgres:///tps?host=/var/run/postgresql', {}), [], 'a Unix socket has no address');
  });

  it('reads the Redis host', () => {
    assert.equal(redisHost('redis://10.0.0.8:6379'), '10.0.0.8');
    assert.equal(redisHost('rediss://:secret@[fd00::8]:6380/0'), 'fd00::8');
    assert.equal(redisHost('redis://'), 'localhost');
  });

  it('gathers front-end IPs and the resolved database and Redis hosts', async () => {
    const hosts = await ownHosts({
      frontendIps: ['127.0.0.2', '::1'],
      databaseUrl: 'postgres://tps@localhost:5432/tps',
      redisUrl: 'redis://10.0.0.8:6379',
    });
    assert.ok(hosts.includes('127.0.0.2') && hosts.includes('::1') && hosts.includes('10.0.0.8'), JSON.stringify(hosts));
    assert.ok(hosts.includes('127.0.0.1'), 'localhost resolved');
    assert.deepEqual(
      originPolicySettings({ originAllowedNetworks: ['10.0.0.0/8'] }, hosts, [{ host: '127.0.0.1', port: 8080 }]).ownListeners,
      [{ address: '127.0.0.1', port: 8080 }],
    );
  });
});
