/**
 * Layer 4 proxies live from the API: a configuration created, changed or deleted through the API
 * takes effect on real sockets without a restart, and its status tells whether it is served; behind
 * a trusted load balancer, the client its PROXY header names is the one admitted.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const FRONTEND = '127.0.0.31';
const LISTED_CLIENT = '127.0.0.39';
/** A load balancer in front of the edge that sends PROXY headers (TPS_TRUSTED_PROXIES). */
const LOAD_BALANCER = '127.0.0.33';

/** An origin that answers every chunk with `<name>:<chunk>`. */
async function namedEchoOrigin(host: string, name: string): Promise<{ port: number; server: net.Server; connections: () => number }> {
  let connections = 0;
  const server = net.createServer((socket) => {
    connections++;
    socket.on('data', (chunk) => socket.write(`${name}:${chunk.toString()}`));
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { port: (server.address() as net.AddressInfo).port, server, connections: () => connections };
}

/** Connects (optionally from a chosen loopback address), sends `text`, resolves with the first reply or 'CLOSED'. */
function exchange(port: number, text: string, localAddress?: string, socket?: net.Socket): Promise<{ reply: string; socket: net.Socket }> {
  return new Promise((resolve, reject) => {
    const client = socket ?? net.connect({ host: FRONTEND, port, ...(localAddress && { localAddress }) });
    const timer = setTimeout(() => reject(new Error('no reply within 5 s')), 5_000);
    const done = (reply: string) => {
      clearTimeout(timer);
      client.off('data', onData);
      resolve({ reply, socket: client });
    };
    const onData = (chunk: Buffer) => done(chunk.toString());
    client.on('data', onData);
    client.once('close', () => done('CLOSED'));
    client.once('error', () => done('CLOSED'));
    client.write(text);
  });
}

describe('layer 4 proxies from the API', () => {
  let tps: Tps;
  let api: TenantApi;
  let feedDir: string;

  before(async () => {
    feedDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-feed-'));
    fs.writeFileSync(path.join(feedDir, 'feed.txt'), `# test feed\n${LISTED_CLIENT}/32 ; a listed client\n`);
    tps = await startTps({
      env: {
        // Origins (and CRL servers) run on loopback, which the origin policy refuses unless allowed.
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: `${FRONTEND},127.0.0.32`,
        TPS_THREAT_FEEDS: path.join(feedDir, 'feed.txt'),
        TPS_TRUSTED_PROXIES: LOAD_BALANCER,
        TPS_LISTENER_PROXY_PROTOCOL: 'required',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(async () => {
    await tps.stop();
    fs.rmSync(feedDir, { recursive: true, force: true });
  });

  const statusOf = async (id: string) =>
    (await api.get(`${CONFIGS}/${id}`)).body.data.attributes as { status: string; statusDetail: string | null };
  const waitForStatus = (id: string, status: string) =>
    waitFor(`status ${status}`, async () => {
      const attributes = await statusOf(id);
      return attributes.status === status ? attributes : undefined;
    });

  it('serves a created proxy, applies a change without dropping connections, and frees the port on delete', async () => {
    const first = await namedEchoOrigin('127.0.0.35', 'first');
    const second = await namedEchoOrigin('127.0.0.36', 'second');
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: '127.0.0.35', port: first.port }] } },
      },
    });
    assert.equal(created.status, 201);
    const id = created.body.data.id as string;
    await waitForStatus(id, 'ACTIVE');

    const established = await exchange(port, 'hello');
    assert.equal(established.reply, 'first:hello');

    const patched = await api.call('PATCH', `${CONFIGS}/${id}`, {
      data: { type: 'l4Proxy', attributes: { backend: { hosts: [{ address: '127.0.0.36', port: second.port }] } } },
    });
    assert.equal(patched.status, 200);
    await waitFor('the new origin to serve new connections', async () => {
      const { reply, socket } = await exchange(port, 'probe');
      socket.destroy();
      return reply === 'second:probe' ? true : undefined;
    });
    assert.equal(
      (await exchange(port, 'still there?', undefined, established.socket)).reply,
      'first:still there?',
      'the established connection was kept',
    );
    established.socket.destroy();

    assert.equal((await api.call('DELETE', `${CONFIGS}/${id}`)).status, 204);
    await waitFor('the port to be released', async () => {
      const refused = await new Promise<boolean>((resolve) => {
        const socket = net.connect({ host: FRONTEND, port });
        socket.once('connect', () => {
          socket.destroy();
          resolve(false);
        });
        socket.once('error', () => resolve(true));
      });
      return refused ? true : undefined;
    });
    first.server.close();
    second.server.close();
  });

  it('refuses a client listed in the threat feed before the origin sees it', async () => {
    const origin = await namedEchoOrigin('127.0.0.35', 'origin');
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: '127.0.0.35', port: origin.port }] } },
      },
    });
    await waitForStatus(created.body.data.id, 'ACTIVE');
    assert.equal((await exchange(port, 'hi', LISTED_CLIENT)).reply, 'CLOSED');
    assert.equal(origin.connections(), 0, 'the origin never saw the listed client');
    const allowed = await exchange(port, 'hi', '127.0.0.38');
    assert.equal(allowed.reply, 'origin:hi');
    allowed.socket.destroy();
    const metrics = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
    await waitFor('the refusal in the metrics', async () => {
      const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
      return /tps_edge_refused_total\{[^}]*reason="THREAT_FEED"[^}]*\} [1-9]/.test(text) ? true : undefined;
    });
    assert.ok(metrics.length > 0);
    origin.server.close();
  });

  it('behind a trusted load balancer, checks the client its PROXY header names, and requires the header', async () => {
    const origin = await namedEchoOrigin('127.0.0.35', 'origin');
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: '127.0.0.35', port: origin.port }] } },
      },
    });
    await waitForStatus(created.body.data.id, 'ACTIVE');
    const header = (client: string) => `PROXY TCP4 ${client} ${FRONTEND} 40000 ${port}\r\n`;
    assert.equal(
      (await exchange(port, `${header(LISTED_CLIENT)}hi`, LOAD_BALANCER)).reply,
      'CLOSED',
      'the listed client behind the load balancer',
    );
    assert.equal((await exchange(port, 'no header', LOAD_BALANCER)).reply, 'CLOSED', 'required: the load balancer must send one');
    assert.equal(origin.connections(), 0);
    const allowed = await exchange(port, `${header('198.51.100.7')}hi`, LOAD_BALANCER);
    assert.equal(allowed.reply, 'origin:hi', 'the header is not passed on as payload');
    allowed.socket.destroy();
    // A direct client needs no header (and a header it sends is its payload).
    const direct = await exchange(port, 'direct', '127.0.0.38');
    assert.equal(direct.reply, 'origin:direct');
    direct.socket.destroy();
    origin.server.close();
  });

  it('holds per-source caps across all workers of the node', async () => {
    const origin = await namedEchoOrigin('127.0.0.35', 'origin');
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: '127.0.0.35', port: origin.port }] },
          connectionLimits: { maxConnectionsPerSource: 3, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 1000 },
        },
      },
    });
    await waitForStatus(created.body.data.id, 'ACTIVE');
    // Ten connections from one source, held open: whichever worker accepts each, three get through.
    const replies = await Promise.all(Array.from({ length: 10 }, (_, i) => exchange(port, `c${i}`, '127.0.0.37')));
    const served = replies.filter(({ reply }) => reply.startsWith('origin:'));
    assert.equal(served.length, 3, JSON.stringify(replies.map(({ reply }) => reply)));
    assert.equal((await exchange(port, 'other source', '127.0.0.38')).reply, 'origin:other source', 'another source is not affected');
    for (const { socket } of replies) socket.destroy();
    origin.server.close();
  });

  it('reports ERROR with the reason when the port cannot be bound', async () => {
    const squatter = net.createServer();
    const port = await freePort(FRONTEND);
    await new Promise<void>((resolve) => squatter.listen(port, FRONTEND, resolve));
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: '127.0.0.35', port: 9 }] } },
      },
    });
    const failed = await waitForStatus(created.body.data.id, 'ERROR');
    assert.match(failed.statusDetail ?? '', /EADDRINUSE/);
    squatter.close();
    // The edge tries again: once the port is free the proxy is served.
    await waitForStatus(created.body.data.id, 'ACTIVE');
  });
});
