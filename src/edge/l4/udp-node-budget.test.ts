/**
 * UDP sessions in the node's budget of edge connections, over real sockets on loopback: each
 * session holds one place from its first datagram to its end, whatever ends it (idle, eviction,
 * origin error, the proxy's stop), and gives it back exactly once. A budget that counts every take
 * and give-back checks the "exactly once": its count of places held must be the sessions alive.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { L4Counters, L4Proxy, type L4ProxyOptions } from './l4-proxy.ts';
import { ThreatFeed } from './threat-feed.ts';
import type { ConnectionBudget } from '../shared-counters/node-connection-budget.ts';
import { NodeConnectionBudget } from '../shared-counters/node-connection-budget.ts';
import { permissiveOriginGuard, recordingOriginGuard } from '../../../test/support/origin-guard.ts';
import {
  connectionOutcome,
  eventually,
  freePort,
  l4Attributes,
  startEchoOrigin,
  startUdpEchoOrigin,
  udpExchange,
} from '../../../test/support/l4.ts';

const FRONT = '127.0.0.2';
const ORIGIN = '127.0.0.3';

/** A budget that keeps count: places held, taken, given back, and give-backs of a place nobody held. */
class CountingBudget implements ConnectionBudget {
  held = 0;
  taken = 0;
  givenBack = 0;
  /** A release with no place held: a session gave its place back twice (or never took one). */
  overReleased = 0;
  readonly #limit: number;
  constructor(limit: number) {
    this.#limit = limit;
  }
  tryAcquire(): boolean {
    if (this.held >= this.#limit) return false;
    this.held++;
    this.taken++;
    return true;
  }
  release(): void {
    if (this.held === 0) {
      this.overReleased++;
      return;
    }
    this.held--;
    this.givenBack++;
  }
}

/** Resources a test opened, closed in reverse order after it, whether it passed or failed. */
class Cleanup {
  private readonly steps: Array<() => unknown> = [];
  add<T>(resource: T, close: (resource: T) => unknown): T {
    this.steps.push(() => close(resource));
    return resource;
  }
  async run(): Promise<void> {
    for (const step of this.steps.reverse()) await step();
    this.steps.length = 0;
  }
}

function test(name: string, body: (cleanup: Cleanup) => Promise<void>): void {
  it(name, { timeout: 20_000 }, async (t) => {
    const cleanup = new Cleanup();
    t.after(() => cleanup.run());
    await body(cleanup);
  });
}

async function udpProxy(
  cleanup: Cleanup,
  port: number,
  hosts: Array<{ address: string; port: number }>,
  options: Omit<L4ProxyOptions, 'id' | 'threatFeed' | 'originGuard' | 'attributes'> & {
    threatFeed?: ThreatFeed;
    originGuard?: L4ProxyOptions['originGuard'];
    id?: string;
  },
): Promise<L4Proxy> {
  const created = new L4Proxy({
    id: 'udp-proxy',
    threatFeed: ThreatFeed.fromEntries([]),
    originGuard: permissiveOriginGuard(),
    attributes: l4Attributes({ ipv4: FRONT, port }, hosts, { protocols: ['UDP'] }),
    ...options,
  });
  await created.start();
  return cleanup.add(created, (proxy) => proxy.stop());
}

async function echoOrigin(cleanup: Cleanup) {
  return cleanup.add(await startUdpEchoOrigin(ORIGIN), (origin) => origin.close());
}

/** One datagram from `source`; its echo, or undefined when none came back. */
async function send(port: number, source: string, text: string, replyTimeoutMs?: number): Promise<string | undefined> {
  const { replies } = await udpExchange(FRONT, port, [Buffer.from(text)], {
    localAddress: source,
    ...(replyTimeoutMs !== undefined && { replyTimeoutMs }),
  });
  return replies[0]?.toString();
}

describe('UDP sessions in the node budget', () => {
  test('a session takes a place at its first datagram and gives it back once at its idle end', async (cleanup) => {
    const origin = await echoOrigin(cleanup);
    const port = await freePort(FRONT);
    const budget = new CountingBudget(10);
    const metrics = new L4Counters();
    const l4 = await udpProxy(cleanup, port, [origin], { nodeBudget: budget, metrics, udpSessionIdleMs: 300 });
    assert.equal(await send(port, '127.0.0.5', 'a'), 'a');
    assert.equal(await send(port, '127.0.0.6', 'b'), 'b');
    assert.equal(budget.held, 2);
    assert.equal(l4.connections, 2);
    await eventually(() => l4.connections === 0, 'idle sessions ended');
    assert.equal(metrics.closed.UDP.IDLE_TIMEOUT, 2);
    assert.deepEqual(
      { held: budget.held, taken: budget.taken, givenBack: budget.givenBack, overReleased: budget.overReleased },
      {
        held: 0,
        taken: 2,
        givenBack: 2,
        overReleased: 0,
      },
    );
  });

  test('a full budget: the oldest unconfirmed session of the relay hands its place to the newcomer', async (cleanup) => {
    const origin = await echoOrigin(cleanup);
    const port = await freePort(FRONT);
    const budget = new CountingBudget(2);
    const metrics = new L4Counters();
    const l4 = await udpProxy(cleanup, port, [origin], { nodeBudget: budget, metrics });
    assert.equal(await send(port, '127.0.0.5', 'a'), 'a');
    assert.equal(await send(port, '127.0.0.6', 'b'), 'b');
    // The relay's own caps (10,000 sessions, 1000 unconfirmed) are far; the node's budget is full.
    assert.equal(await send(port, '127.0.0.7', 'c'), 'c');
    assert.equal(metrics.udpSessionsEvicted, 1);
    assert.equal(metrics.closed.UDP.EVICTED, 1);
    assert.equal(metrics.refused.UDP.NODE_BUDGET, undefined);
    assert.equal(l4.connections, 2);
    // The place went from the evicted session to the newcomer: neither given back nor taken again.
    assert.deepEqual({ held: budget.held, taken: budget.taken, givenBack: budget.givenBack }, { held: 2, taken: 2, givenBack: 0 });
    // The newcomer's session is the one kept: its next datagram is relayed.
    assert.equal(await send(port, '127.0.0.7', 'c'), 'c');
  });

  test("a full budget and no unconfirmed session of this relay: the datagram is dropped, counted NODE_BUDGET, another proxy's sessions kept", async (cleanup) => {
    const origin = await echoOrigin(cleanup);
    const budget = new CountingBudget(1);
    const [portA, portB] = [await freePort(FRONT), await freePort(FRONT)];
    const metricsA = new L4Counters();
    const metricsB = new L4Counters();
    const a = await udpProxy(cleanup, portA, [origin], { id: 'a', nodeBudget: budget, metrics: metricsA });
    const b = await udpProxy(cleanup, portB, [origin], { id: 'b', nodeBudget: budget, metrics: metricsB });
    assert.equal(await send(portA, '127.0.0.5', 'a'), 'a');
    assert.equal(await send(portB, '127.0.0.6', 'b', 300), undefined);
    assert.equal(metricsB.refused.UDP.NODE_BUDGET, 1);
    assert.equal(metricsB.accepted.UDP, 0, 'not admitted: the flood caps were not asked');
    assert.deepEqual(
      origin.received.map((payload) => payload.toString()),
      ['a'],
      'the origin saw nothing of the dropped datagram',
    );
    assert.equal(metricsA.udpSessionsEvicted, 0, "a proxy's sessions do not make room for another's");
    assert.equal(a.connections, 1);
    assert.equal(b.connections, 0);
    assert.equal(budget.held, 1);
    assert.equal(await send(portA, '127.0.0.5', 'a again'), 'a again');
  });

  test("a refused datagram ends no one's session, and gives back the place it had taken", async (cleanup) => {
    const origin = await echoOrigin(cleanup);
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    // Room in the budget: the listed source's datagram takes a place, is refused, gives it back.
    const roomy = new CountingBudget(5);
    const listed = ThreatFeed.fromEntries(['127.0.0.9']);
    await udpProxy(cleanup, port, [origin], { nodeBudget: roomy, metrics, threatFeed: listed });
    assert.equal(await send(port, '127.0.0.9', 'x', 300), undefined);
    assert.equal(metrics.refused.UDP.THREAT_FEED, 1);
    assert.deepEqual({ held: roomy.held, taken: roomy.taken, givenBack: roomy.givenBack }, { held: 0, taken: 1, givenBack: 1 });

    // A full budget, held by an unconfirmed session: a listed source would evict it were it admitted; it is not.
    const full = new CountingBudget(1);
    const fullPort = await freePort(FRONT);
    const fullMetrics = new L4Counters();
    const l4 = await udpProxy(cleanup, fullPort, [origin], { nodeBudget: full, metrics: fullMetrics, threatFeed: listed });
    assert.equal(await send(fullPort, '127.0.0.5', 'a'), 'a');
    assert.equal(await send(fullPort, '127.0.0.9', 'x', 300), undefined);
    assert.equal(fullMetrics.refused.UDP.THREAT_FEED, 1);
    assert.equal(fullMetrics.udpSessionsEvicted, 0);
    assert.equal(l4.connections, 1);
    assert.deepEqual({ held: full.held, taken: full.taken, givenBack: full.givenBack }, { held: 1, taken: 1, givenBack: 0 });
  });

  test('an origin error and an origin the policy refuses give the place back', async (cleanup) => {
    const dead = { address: ORIGIN, port: await freePort(ORIGIN) }; // nothing listens there: ICMP port unreachable
    const port = await freePort(FRONT);
    const budget = new CountingBudget(5);
    const metrics = new L4Counters();
    await udpProxy(cleanup, port, [dead], { nodeBudget: budget, metrics });
    assert.equal(await send(port, '127.0.0.5', 'lost', 300), undefined);
    await eventually(() => metrics.closed.UDP.ORIGIN_ERROR === 1, 'the session ended on the origin error');
    assert.deepEqual({ held: budget.held, taken: budget.taken, givenBack: budget.givenBack }, { held: 0, taken: 1, givenBack: 1 });

    const { guard } = recordingOriginGuard({ allowedNetworks: ['127.0.0.0/8'], ownHosts: [ORIGIN] });
    const refusedPort = await freePort(FRONT);
    const policyBudget = new CountingBudget(5);
    await udpProxy(cleanup, refusedPort, [{ address: ORIGIN, port: 9 }], { nodeBudget: policyBudget, originGuard: guard });
    assert.equal(await send(refusedPort, '127.0.0.5', 'x', 300), undefined);
    assert.deepEqual({ held: policyBudget.held, givenBack: policyBudget.givenBack }, { held: 0, givenBack: policyBudget.taken });
    assert.equal(budget.overReleased + policyBudget.overReleased, 0);
  });

  test("the proxy's stop gives every session's place back, once", async (cleanup) => {
    const origin = await echoOrigin(cleanup);
    const port = await freePort(FRONT);
    const budget = new CountingBudget(10);
    const metrics = new L4Counters();
    const l4 = await udpProxy(cleanup, port, [origin], { nodeBudget: budget, metrics });
    for (const source of ['127.0.0.5', '127.0.0.6', '127.0.0.7']) assert.equal(await send(port, source, source), source);
    assert.equal(budget.held, 3);
    await l4.stop();
    await l4.stop();
    assert.equal(metrics.closed.UDP.CLOSED_BY_PROXY, 3);
    assert.deepEqual(
      { held: budget.held, givenBack: budget.givenBack, overReleased: budget.overReleased },
      {
        held: 0,
        givenBack: 3,
        overReleased: 0,
      },
    );
  });

  test('UDP sessions and TCP connections share the node budget in shared memory', async (cleanup) => {
    const udpOrigin = await echoOrigin(cleanup);
    const tcpOrigin = cleanup.add(await startEchoOrigin(ORIGIN), (origin) => origin.close());
    const buffer = NodeConnectionBudget.allocate(2, 1);
    const nodeBudget = new NodeConnectionBudget(buffer, 0);
    const [udpPort, tcpPort] = [await freePort(FRONT), await freePort(FRONT)];
    const udpMetrics = new L4Counters();
    const tcpMetrics = new L4Counters();
    const udp = await udpProxy(cleanup, udpPort, [udpOrigin], { nodeBudget, metrics: udpMetrics, udpSessionIdleMs: 300 });
    const tcp = new L4Proxy({
      id: 'tcp-proxy',
      threatFeed: ThreatFeed.fromEntries([]),
      originGuard: permissiveOriginGuard(),
      attributes: l4Attributes({ ipv4: FRONT, port: tcpPort }, [tcpOrigin]),
      nodeBudget,
      metrics: tcpMetrics,
    });
    await tcp.start();
    cleanup.add(tcp, (proxy) => proxy.stop());
    assert.equal(await send(udpPort, '127.0.0.5', 'a'), 'a');
    assert.equal(await send(udpPort, '127.0.0.6', 'b'), 'b');
    assert.equal(NodeConnectionBudget.read(buffer).open, 2);
    assert.equal(await connectionOutcome(FRONT, tcpPort, '127.0.0.7'), 'ECONNRESET');
    assert.equal(tcpMetrics.refused.TCP.NODE_BUDGET, 1);
    await eventually(
      () => udp.connections === 0 && NodeConnectionBudget.read(buffer).open === 0,
      'the sessions ended, their places given back',
    );
    assert.equal(await connectionOutcome(FRONT, tcpPort, '127.0.0.7'), 'ECHO');
  });
});
