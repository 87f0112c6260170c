/**
 * UDP sessions under a flood of spoofed sources, against a started `tps serve` with its edge, over
 * real sockets: a client that has shown it receives (it echoed a token of a reply) keeps its
 * session while many sources of 127.0.0.0/8 that never answer open sessions; those take the places
 * of one another (the oldest unconfirmed first, TPS_UDP_MAX_UNCONFIRMED_SESSIONS), counted on
 * /metrics, and never the confirmed client's.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket, type Socket as DatagramSocket } from 'node:dgram';
import { randomBytes } from 'node:crypto';
import { startTps, createTenant, type Tps } from '../../support/tps.ts';
import { TenantApi } from '../../support/api-client.ts';
import { waitFor } from '../../support/wait.ts';
import { freePort } from '../../support/ports.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const FRONTEND = '127.0.0.2';
const ORIGIN = '127.0.61.1';
const CLIENT = '127.0.61.2';
const NEWCOMER = '127.0.61.3';
/** Spoofed sources: 127.0.62.1 ... */
const SPOOFED_SOURCES = 40;
const UNCONFIRMED_BUDGET = 4;
const TOKEN_BYTES = 16;

async function metric(tps: Tps, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`)))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function bound(address: string): Promise<DatagramSocket> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, address, resolve));
  return socket;
}

/**
 * The origin: answers every datagram with a fresh random token, then the datagram, and notes from
 * which relay port each payload came (one upstream port per session).
 */
async function tokenOrigin() {
  const socket = await bound(ORIGIN);
  const portOf = new Map<string, number>();
  socket.on('message', (message, rinfo) => {
    const text = message.toString('latin1');
    // After the last '|': a token before the tag is random bytes, and may hold a '|' of its own.
    portOf.set(text.slice(text.lastIndexOf('|') + 1), rinfo.port);
    socket.send(Buffer.concat([randomBytes(TOKEN_BYTES), Buffer.from('|'), message]), rinfo.port, rinfo.address);
  });
  return { port: socket.address().port, portOf, close: () => socket.close() };
}

/** A client that reads its replies: sends, and waits for the reply carrying what it sent. */
function exchanger(socket: DatagramSocket, port: number) {
  const replies: Buffer[] = [];
  socket.on('message', (reply) => replies.push(reply));
  return async (payload: Buffer): Promise<Buffer> => {
    const tag = payload.subarray(payload.lastIndexOf('|') + 1).toString('latin1');
    // Datagrams may be lost: send again until the answer is there (a condition, not a duration).
    return waitFor(`the reply to ${tag}`, async () => {
      const found = replies.find((reply) => reply.toString('latin1').endsWith(`|${tag}`));
      if (found !== undefined) return found;
      socket.send(payload, port, FRONTEND);
      await new Promise((resolve) => setTimeout(resolve, 100));
      return replies.find((reply) => reply.toString('latin1').endsWith(`|${tag}`));
    });
  };
}

describe('UDP sessions: a confirmed client keeps its session under a spoofed-source flood', () => {
  let tps: Tps;
  let api: TenantApi;

  before(async () => {
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_UDP_MAX_UNCONFIRMED_SESSIONS: String(UNCONFIRMED_BUDGET),
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(() => tps?.stop());

  it('relays the confirmed client through the same session while spoofed sources evict one another', async () => {
    const origin = await tokenOrigin();
    const client = await bound(CLIENT);
    const newcomer = await bound(NEWCOMER);
    const spoofed: DatagramSocket[] = [];
    try {
      const port = await freePort(FRONTEND);
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'l4Proxy',
          attributes: {
            frontend: { ipv4: FRONTEND, port },
            backend: { hosts: [{ address: ORIGIN, port: origin.port }] },
            protocols: ['UDP'],
            threatIntelligence: { enabled: false },
          },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.data.id as string;
      await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE');

      // The client confirms: its second datagram carries the token of the first reply.
      const exchange = exchanger(client, port);
      const first = await exchange(Buffer.from('|hello-1'));
      const token = first.subarray(0, TOKEN_BYTES);
      await exchange(Buffer.concat([token, Buffer.from('|hello-2')]));
      const sessionPort = origin.portOf.get('hello-1');
      assert.ok(sessionPort !== undefined);
      assert.equal(origin.portOf.get('hello-2'), sessionPort, 'one session so far');

      // The flood: sources that send and never read, ten times the unconfirmed budget.
      for (let i = 1; i <= SPOOFED_SOURCES; i++) spoofed.push(await bound(`127.0.62.${i}`));
      for (let round = 0; round < 3; round++) {
        for (const [index, socket] of spoofed.entries()) socket.send(Buffer.from(`|spoofed-${index}-${round}`), port, FRONTEND);
      }
      await waitFor(
        'the spoofed sessions to evict one another',
        async () => (await metric(tps, 'tps_edge_udp_sessions_evicted_total', { proxy: id })) >= SPOOFED_SOURCES - UNCONFIRMED_BUDGET,
      );

      // The confirmed client is still served, through the very session it had.
      await exchange(Buffer.from('|after-flood'));
      assert.equal(origin.portOf.get('after-flood'), sessionPort, 'the confirmed session was kept');
      // A new client is served too: an unconfirmed place is always to be had.
      await exchanger(newcomer, port)(Buffer.from('|newcomer'));
      assert.equal(await metric(tps, 'tps_edge_refused_total', { proxy: id, reason: 'SESSION_LIMIT' }), 0);
    } finally {
      for (const socket of spoofed) socket.close();
      client.close();
      newcomer.close();
      origin.close();
    }
  });
});
