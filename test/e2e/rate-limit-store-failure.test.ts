/**
 * Rate limits whose shared counters (a real redis-server, TPS_REDIS_URL) stop answering: killed (a
 * refused connection) or stopped with SIGSTOP (a server that hangs: only the command timeout ends
 * the wait). TPS_RATE_LIMIT_STORE_FAILURE_MODE decides: `local` (default) still refuses a client over
 * the limit by the node's own count and serves one under it, `closed` answers 503, `open` lets
 * through; every such request is counted on /metrics, and /healthz warns while it lasts. Once Redis
 * answers again, the shared counts are used again (the client's keys appear in Redis).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { Redis } from 'ioredis';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { waitFor } from '../support/wait.ts';
import { freePort } from '../support/ports.ts';

const FRONTEND = '127.0.71.1';
const ORIGIN = '127.0.71.254';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const LIMIT = 5;
const METRIC = 'tps_edge_rate_limit_store_failures_total';

interface Reply {
  status: number;
  retryAfter: string | undefined;
  body: string;
}

function get(url: string, client: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false, localAddress: client }, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'], body }));
      })
      .on('error', reject);
  });
}

let probes = 0;
/**
 * A request that may be the one the node sends on to Redis to see whether it answers again (one a
 * second while it fails), from a client of its own: a blocked client is refused before any counting.
 */
async function probe(url: string): Promise<void> {
  await get(`${url}/probe`, `127.0.72.${1 + (probes++ % 250)}`);
}

async function statuses(url: string, client: string, count: number): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) seen.push((await get(`${url}/r${i}`, client)).status);
  return seen;
}

/** A redis-server on a fixed loopback port, which the test kills, stops, resumes and restarts. */
class RedisServer {
  #process: ChildProcess | undefined;
  readonly port: number;
  constructor(port: number) {
    this.port = port;
  }

  async start(): Promise<void> {
    this.#process = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(this.port), '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    const probe = new Redis({ host: '127.0.0.1', port: this.port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {});
    try {
      await waitFor(
        'redis-server',
        async () => {
          try {
            await probe.connect();
            return (await probe.ping()) === 'PONG';
          } catch {
            probe.disconnect();
            return false;
          }
        },
        { timeoutMs: 15_000 },
      );
    } finally {
      probe.disconnect();
    }
  }

  async kill(): Promise<void> {
    const child = this.#process;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }

  signal(signal: 'SIGSTOP' | 'SIGCONT'): void {
    this.#process?.kill(signal);
  }

  /** A client's requests counted in Redis (its key is named after it; one threshold: field `c1`), 0 when it has none. */
  async countOf(client: string): Promise<number> {
    const redis = new Redis({ host: '127.0.0.1', port: this.port, maxRetriesPerRequest: 0 });
    try {
      const keys = await redis.keys(`tps:rl:*:${client}`);
      if (keys.length === 0) return 0;
      assert.equal(keys.length, 1);
      return Number(await redis.hget(keys[0]!, 'c1'));
    } finally {
      redis.disconnect();
    }
  }
}

async function metric(tps: Tps, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${METRIC}{`)) continue;
    if (Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`)))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function storeWarning(tps: Tps): Promise<string | undefined> {
  const health = (await (await fetch(`${tps.metricsUrl}/healthz`)).json()) as { warnings?: { code: string; detail: string }[] };
  return health.warnings?.find((warning) => warning.code === 'RATE_LIMIT_STORE_FAILING')?.detail;
}

/** One `tps serve` with its edge counting in `redis`, and a proxy limited to LIMIT requests a minute per client. */
async function serveWithRedis(
  redis: RedisServer,
  origin: http.Server,
  env: Record<string, string> = {},
): Promise<{ tps: Tps; url: string; proxyId: string }> {
  const tps = await startTps({
    env: {
      TPS_EDGE: 'true',
      TPS_EDGE_WORKERS: '1',
      TPS_FRONTEND_IPS: FRONTEND,
      TPS_REDIS_URL: `redis://127.0.0.1:${redis.port}`,
      TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      ...env,
    },
  });
  const api = await TenantApi.connect(tps, await createTenant(tps));
  const port = await freePort(FRONTEND);
  const created = await api.call('POST', CONFIGS, {
    data: {
      type: 'httpProxy',
      attributes: {
        frontend: { ipv4: FRONTEND, port },
        backend: { hosts: [{ address: ORIGIN, port: (origin.address() as { port: number }).port }] },
        rateLimiting: { thresholds: [{ requests: LIMIT, periodSeconds: 60 }], blockSeconds: 60 },
      },
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const proxyId = created.body.data.id as string;
  await waitFor('the proxy ACTIVE', async () => (await api.get(`${CONFIGS}/${proxyId}`)).body.data.attributes.status === 'ACTIVE', {
    timeoutMs: 20_000,
  });
  return { tps, url: `http://${FRONTEND}:${port}`, proxyId };
}

describe('rate limits while Redis does not answer', () => {
  let origin: http.Server;
  let redis: RedisServer;

  before(async () => {
    origin = http.createServer((_request, response) => response.end('origin'));
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    redis = new RedisServer(await freePort('127.0.0.1'));
  });
  after(async () => {
    redis.signal('SIGCONT');
    await redis.kill();
    origin.close();
  });

  describe('local (the default)', () => {
    let tps: Tps;
    let url = '';
    let proxyId = '';
    before(async () => {
      await redis.start();
      ({ tps, url, proxyId } = await serveWithRedis(redis, origin));
    });
    after(async () => {
      redis.signal('SIGCONT');
      await tps?.stop();
      await redis.kill();
    });

    it('counts in Redis while it answers', async () => {
      assert.deepEqual(await statuses(url, '127.0.71.10', 2), [200, 200]);
      assert.equal(await redis.countOf('127.0.71.10'), 2, 'the client is counted in Redis');
      assert.equal(await metric(tps, { proxy: proxyId }), 0);
      assert.equal(await storeWarning(tps), undefined);
    });

    it('a Redis that hangs (SIGSTOP): the node counts alone, a client over the limit still gets 429', async () => {
      redis.signal('SIGSTOP');
      // The first request waits out the command timeout; the rest are decided at once.
      const over = await statuses(url, '127.0.71.11', LIMIT + 3);
      assert.deepEqual(over, [...Array(LIMIT).fill(200), 429, 429, 429]);
      assert.deepEqual(await statuses(url, '127.0.71.12', 1), [200], 'a client under the limit is served');
      const counted = await waitFor('the failures counted', async () => {
        const value = await metric(tps, { proxy: proxyId, mode: 'local' });
        return value >= LIMIT + 2 && value;
      });
      assert.ok(counted >= LIMIT + 2, `every request decided by the failure mode counted (${counted})`);
      const warning = await waitFor('the /healthz warning', () => storeWarning(tps));
      assert.match(warning, /rate limits count on this node only/);
      assert.match(tps.output(), /failure mode local applies/);
    });

    it('Redis resumed (SIGCONT): the shared counts are used again', async () => {
      redis.signal('SIGCONT');
      // The next probe (a second after the last failure) finds Redis answering.
      await waitFor(
        'the store answering again',
        async () => {
          await probe(url);
          return (await storeWarning(tps)) === undefined;
        },
        { timeoutMs: 20_000 },
      );
      assert.deepEqual(await statuses(url, '127.0.71.14', 3), [200, 200, 200]);
      assert.equal(await redis.countOf('127.0.71.14'), 3, 'every request counted in Redis again');
    });

    it('Redis killed: refused connections, the same; restarted: shared counts again', async () => {
      await redis.kill();
      assert.deepEqual(await statuses(url, '127.0.71.15', LIMIT + 2), [...Array(LIMIT).fill(200), 429, 429]);
      assert.deepEqual(await statuses(url, '127.0.71.16', 1), [200]);
      await waitFor('the /healthz warning', () => storeWarning(tps));
      await redis.start();
      await waitFor(
        'the store answering again',
        async () => {
          await probe(url);
          return (await storeWarning(tps)) === undefined;
        },
        { timeoutMs: 20_000 },
      );
      assert.deepEqual(await statuses(url, '127.0.71.17', 1), [200]);
      assert.equal(await redis.countOf('127.0.71.17'), 1, 'counted in the restarted Redis');
    });
  });

  describe('closed', () => {
    let tps: Tps;
    let url = '';
    let proxyId = '';
    before(async () => {
      await redis.start();
      ({ tps, url, proxyId } = await serveWithRedis(redis, origin, { TPS_RATE_LIMIT_STORE_FAILURE_MODE: 'closed' }));
    });
    after(async () => {
      await tps?.stop();
      await redis.kill();
    });

    it('answers 503 with the page and Retry-After while Redis is down, counted; served again once it is back', async () => {
      assert.equal((await get(`${url}/`, '127.0.71.20')).status, 200);
      await redis.kill();
      const refused = await get(`${url}/`, '127.0.71.20');
      assert.equal(refused.status, 503);
      assert.equal(refused.retryAfter, '5');
      assert.match(refused.body, /request limits of this site could not be checked/);
      assert.match(refused.body, /Support ID: <code>[0-9a-f]{32}<\/code>/);
      await waitFor('the 503 counted', async () => (await metric(tps, { proxy: proxyId, mode: 'closed' })) >= 1);
      await redis.start();
      await waitFor('served again', async () => (await get(`${url}/`, '127.0.71.21')).status === 200, { timeoutMs: 20_000 });
    });
  });

  describe('open', () => {
    let tps: Tps;
    let url = '';
    let proxyId = '';
    before(async () => {
      await redis.start();
      ({ tps, url, proxyId } = await serveWithRedis(redis, origin, { TPS_RATE_LIMIT_STORE_FAILURE_MODE: 'open' }));
    });
    after(async () => {
      await tps?.stop();
      await redis.kill();
    });

    it('lets every request through while Redis is down, each counted', async () => {
      await redis.kill();
      assert.deepEqual(await statuses(url, '127.0.71.30', LIMIT + 3), Array(LIMIT + 3).fill(200));
      await waitFor('each counted', async () => (await metric(tps, { proxy: proxyId, mode: 'open' })) === LIMIT + 3);
    });
  });
});
