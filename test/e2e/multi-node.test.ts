/**
 * Two edge nodes on one store (`tps serve` and `tps edge`), both serving the same proxy on the same
 * port (SO_REUSEPORT spreads connections between them), with rate-limit counters in a real Redis:
 * the configuration is ACTIVE once both serve it, and a client's limit holds across the nodes.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { startTps, createTenant, REPO_ROOT, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { waitFor } from '../support/wait.ts';
import { freePort } from '../support/ports.ts';

const FRONTEND = '127.0.0.57';
const CLIENT = '127.0.0.58';
const ORIGIN = '127.0.0.59';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';

function get(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false, localAddress: CLIENT }, (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
      })
      .on('error', reject);
  });
}

describe('two edge nodes sharing a store and Redis', () => {
  let redis: ChildProcess;
  let tps: Tps;
  let secondNode: ChildProcess;
  let origin: http.Server;
  let secondNodeOutput = '';

  before(async () => {
    const redisPort = await freePort('127.0.0.1');
    redis = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(redisPort), '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    origin = http.createServer((_request, response) => response.end('origin'));
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    const env = {
      TPS_EDGE: 'true',
      TPS_EDGE_WORKERS: '1',
      TPS_FRONTEND_IPS: FRONTEND,
      TPS_REDIS_URL: `redis://127.0.0.1:${redisPort}`,
      TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
    };
    tps = await startTps({ env });
    secondNode = spawn(process.execPath, [path.join(REPO_ROOT, 'bin/tps.js'), 'edge'], {
      env: { ...process.env, ...tps.env, TPS_NODE_ID: 'second-node' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    secondNode.stdout!.on('data', (chunk: Buffer) => (secondNodeOutput += chunk.toString()));
    secondNode.stderr!.on('data', (chunk: Buffer) => (secondNodeOutput += chunk.toString()));
    await waitFor('the second edge node', async () => secondNodeOutput.includes('tps edge ready'), { timeoutMs: 30_000 });
  });
  after(async () => {
    secondNode?.kill('SIGTERM');
    await tps?.stop();
    origin?.close();
    redis?.kill();
  });

  it('serves the proxy from both nodes and limits a client across them', async () => {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: (origin.address() as { port: number }).port }] },
          rateLimiting: { thresholds: [{ requests: 10, periodSeconds: 60 }], blockSeconds: 60 },
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    // ACTIVE means every live edge node reported serving it: the second node too.
    await waitFor('ACTIVE on both nodes', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
      timeoutMs: 20_000,
    });

    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push(await get(`http://${FRONTEND}:${port}/r${i}`));
    assert.equal(statuses.filter((status) => status === 200).length, 10, JSON.stringify(statuses));
    assert.ok(
      statuses.slice(10).every((status) => status === 429),
      JSON.stringify(statuses),
    );
  });
});
