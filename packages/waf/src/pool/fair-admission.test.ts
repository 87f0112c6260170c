/**
 * Fair admission to the WAF's threads: a flooding client is shed before a benign one, waiting
 * requests start round robin across clients, a request that waits too long is shed, an IPv6
 * client counts by its /64; and by cost: an expensive client is shed before cheap ones and holds
 * few threads, cheap requests overtake expensive ones, and one tenant's expensive flood leaves
 * another tenant's requests admitted.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import fc from 'fast-check';
import { type AdmissionTicket, FairAdmission, clientKey, ipv6Groups } from './fair-admission.ts';
import { WafCostShareError, WafOverloadedError } from '../engine.ts';

const FLOODER = '198.51.100.7';
const BENIGN = '203.0.113.9';

interface Entry {
  client: string;
  tenant: string;
  state: 'running' | 'waiting' | 'shed';
  ticket?: AdmissionTicket;
}

/** Requests of a test: what became of each, who started in which order, the tickets held. */
class Run {
  readonly log: Entry[] = [];
  readonly started: string[] = [];
  readonly held: AdmissionTicket[] = [];
  readonly admission: FairAdmission;
  constructor(admission: FairAdmission) {
    this.admission = admission;
  }

  /** Enters `client` (of `tenant`) and records what becomes of the request. */
  enter(client: string, tenant = '', bodyBytes = 0): Entry {
    const entry: Entry = { client, tenant, state: 'waiting' };
    this.log.push(entry);
    const entered = this.admission.enter(client, tenant, bodyBytes);
    const run = (ticket: AdmissionTicket) => {
      entry.state = 'running';
      entry.ticket = ticket;
      this.started.push(client);
      this.held.push(ticket);
    };
    if (!(entered instanceof Promise)) {
      run(entered);
      return entry;
    }
    entered.then(run, (error: unknown) => {
      assert.ok(error instanceof WafOverloadedError || error instanceof WafCostShareError);
      entry.state = 'shed';
    });
    return entry;
  }

  /** The oldest running request ends, having cost `costMs` (charged when given). */
  leave(costMs?: number): void {
    const ticket = this.held.shift();
    assert.ok(ticket, 'a request is running');
    if (costMs !== undefined) this.admission.charge(ticket, costMs);
    this.admission.leave(ticket);
  }

  count(client: string, state: Entry['state']): number {
    return this.log.filter((entry) => entry.client === client && entry.state === state).length;
  }
}

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('fair admission to the WAF threads', () => {
  it('takes free slots at once, without a promise', () => {
    const admission = new FairAdmission({ slots: 2, queueLength: 4, maxWaitMs: 1000 });
    const a = admission.enter(FLOODER);
    const b = admission.enter(BENIGN);
    assert.ok(!(a instanceof Promise) && !(b instanceof Promise));
    assert.equal(admission.active, 2);
    admission.leave(a);
    assert.equal(admission.active, 1);
  });

  it('sheds a flooding client before a benign one, whatever the order of arrival', async () => {
    const run = new Run(new FairAdmission({ slots: 2, queueLength: 8, maxWaitMs: 60_000 }));
    for (let i = 0; i < 50; i++) run.enter(FLOODER);
    const benign = [run.enter(BENIGN), run.enter(BENIGN), run.enter(BENIGN)];
    for (let i = 0; i < 50; i++) run.enter(FLOODER);
    await settle();
    assert.equal(run.admission.waiting, 8);
    assert.ok(
      benign.every((entry) => entry.state === 'waiting'),
      'every benign request has a place',
    );
    assert.equal(run.count(FLOODER, 'shed'), 100 - 2 - 5, 'the flooder keeps the two slots and five places, and loses the rest');
    // The benign requests start before the flooder's waiting ones (round robin, one each turn).
    for (let i = 0; i < 6; i++) {
      run.leave();
      await settle();
    }
    assert.deepEqual(run.started.slice(2, 8), [FLOODER, BENIGN, FLOODER, BENIGN, FLOODER, BENIGN]);
  });

  it('refuses the newest request of a client that holds as many places as the biggest', async () => {
    const run = new Run(new FairAdmission({ slots: 1, queueLength: 2, maxWaitMs: 60_000 }));
    run.enter('a');
    const a1 = run.enter('a');
    const b1 = run.enter('b');
    const b2 = run.enter('b'); // b holds 1 = a's 1: refused itself
    const c1 = run.enter('c'); // c holds 0 < 1: takes the place of a's newest (the first biggest)
    await settle();
    assert.deepEqual([a1.state, b1.state, b2.state, c1.state], ['shed', 'waiting', 'shed', 'waiting']);
  });

  it('sheds everything past the slots when nothing may wait', async () => {
    const admission = new FairAdmission({ slots: 1, queueLength: 0, maxWaitMs: 1000 });
    assert.ok(!(admission.enter(BENIGN) instanceof Promise));
    const second = admission.enter(BENIGN);
    assert.ok(second instanceof Promise);
    await assert.rejects(second, WafOverloadedError);
  });

  it('sheds a request that waited longer than maxWaitMs, on a freed slot and on the sweep', async () => {
    let now = 0;
    const run = new Run(new FairAdmission({ slots: 1, queueLength: 10, maxWaitMs: 100, now: () => now }));
    run.enter('a');
    const old = run.enter('b');
    now = 50;
    const young = run.enter('c');
    now = 120;
    run.leave();
    await settle();
    assert.equal(old.state, 'shed');
    assert.equal(young.state, 'running');
    const late = run.enter('d');
    now = 300;
    run.admission.sweep();
    await settle();
    assert.equal(late.state, 'shed');
    assert.equal(run.admission.waiting, 0);
    assert.equal(run.admission.active, 1);
  });

  it('keeps slots and waiting counts consistent under any sequence of arrivals and departures', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 6 }),
        fc.array(fc.oneof(fc.constantFrom('x', 'y', 'z', 'w'), fc.constant('leave')), { maxLength: 200 }),
        (slots, queueLength, steps) => {
          const admission = new FairAdmission({ slots, queueLength, maxWaitMs: 60_000 });
          const held: AdmissionTicket[] = [];
          for (const step of steps) {
            if (step === 'leave') {
              const ticket = held.shift();
              if (ticket === undefined) continue;
              admission.leave(ticket);
              continue;
            }
            const entered = admission.enter(step);
            if (entered instanceof Promise) entered.then((ticket) => held.push(ticket)).catch(() => {});
            else held.push(entered);
            assert.ok(admission.active <= slots);
            assert.ok(admission.waiting <= queueLength);
            // Nobody is expensive here (nothing charged): a free slot never stays free while a request waits.
            if (admission.waiting > 0) assert.equal(admission.active, slots);
          }
          admission.close(new Error('closed'));
        },
      ),
    );
  });
});

describe('fair admission by cost', () => {
  const EXPENSIVE = '198.51.100.66';
  const CHEAP = ['203.0.113.1', '203.0.113.2', '203.0.113.3'];

  it('sheds an expensive client before cheap ones, though it has fewer requests waiting', async () => {
    let now = 0;
    const run = new Run(
      new FairAdmission({ slots: 2, queueLength: 6, maxWaitMs: 60_000, expensiveInFlight: 2, expensiveClientShare: 1, now: () => now }),
    );
    // A history: the expensive client's requests cost 200 ms each, the cheap ones 1 ms.
    for (const [client, cost] of [[EXPENSIVE, 200], ...CHEAP.map((c) => [c, 1] as const)] as const) {
      for (let i = 0; i < 3; i++) {
        run.enter(client);
        run.leave(cost);
      }
    }
    now = 100;
    run.enter(CHEAP[0]!);
    run.enter(CHEAP[0]!);
    const expensive = [run.enter(EXPENSIVE), run.enter(EXPENSIVE)];
    const cheap = CHEAP.flatMap((client) => [run.enter(client), run.enter(client)]);
    await settle();
    assert.equal(run.admission.waiting, 6);
    assert.deepEqual(
      expensive.map((entry) => entry.state),
      ['shed', 'shed'],
      'the expensive client lost both places to cheap requests',
    );
    assert.ok(cheap.every((entry) => entry.state === 'waiting'));
    // More of the expensive client: refused at once, the cheap ones keep their places.
    const more = run.enter(EXPENSIVE);
    await settle();
    assert.equal(more.state, 'shed');
    assert.equal(run.count(EXPENSIVE, 'shed'), 3);
  });

  it('lets an expensive client hold only its share of the threads; the rest of its requests wait', async () => {
    let now = 0;
    const run = new Run(
      new FairAdmission({ slots: 8, queueLength: 16, maxWaitMs: 1000, expensiveInFlight: 1, expensiveClientShare: 1, now: () => now }),
    );
    run.enter(EXPENSIVE, '', 100_000);
    run.leave(150);
    run.enter(CHEAP[0]!);
    run.leave(1);
    const first = run.enter(EXPENSIVE, '', 100_000);
    const second = run.enter(EXPENSIVE, '', 100_000);
    const cheap = run.enter(CHEAP[0]!);
    const fresh = run.enter('198.51.100.200', '', 100_000);
    const freshGet = run.enter('198.51.100.201');
    await settle();
    assert.equal(first.state, 'running');
    assert.equal(second.state, 'waiting', 'waits though slots are free: one expensive request at a time');
    assert.equal(cheap.state, 'running', 'a cheap client is admitted at once');
    assert.equal(
      fresh.state,
      'waiting',
      "a client not charged yet is reckoned by its body at its tenant's cost per byte (here: expensive)",
    );
    assert.equal(freshGet.state, 'running', 'and without a body as a cheap request');
    // Its own request ends: the next one goes.
    run.held.splice(run.held.indexOf(first.ticket!), 1);
    run.admission.charge(first.ticket!, 150);
    run.admission.leave(first.ticket!);
    await settle();
    assert.equal(fresh.state, 'running', 'the waiting client that cost the least goes first');
    assert.equal(second.state, 'waiting');
    run.held.splice(run.held.indexOf(fresh.ticket!), 1);
    run.admission.leave(fresh.ticket!);
    await settle();
    assert.equal(second.state, 'running');
    // A waiting expensive request that never gets its turn is shed after maxWaitMs.
    const third = run.enter(EXPENSIVE);
    now = 1500;
    run.admission.sweep();
    await settle();
    assert.equal(third.state, 'shed');
  });

  it('hands a free slot to the least costly waiting client first', async () => {
    const run = new Run(new FairAdmission({ slots: 1, queueLength: 10, maxWaitMs: 60_000, expensiveInFlight: 4 }));
    run.enter(EXPENSIVE);
    run.leave(100);
    run.enter(CHEAP[0]!);
    run.leave(1);
    run.enter(CHEAP[1]!); // holds the slot
    run.enter(EXPENSIVE);
    run.enter(EXPENSIVE);
    run.enter(CHEAP[0]!);
    await settle();
    run.leave(1);
    await settle();
    assert.equal(run.started.at(-1), CHEAP[0], 'the cheap client overtook the expensive one queued before it');
  });

  it("leaves another tenant's requests admitted while one tenant's expensive flood is shed", async () => {
    let now = 0;
    // Room for tenant B's requests, not for tenant A's flood beside them.
    const run = new Run(
      new FairAdmission({ slots: 4, queueLength: 16, maxWaitMs: 60_000, expensiveInFlight: 2, expensiveClientShare: 1, now: () => now }),
    );
    // Tenant A's botnet: many addresses, each request expensive.
    const botnet = Array.from({ length: 20 }, (_, i) => `198.51.100.${i + 1}`);
    for (const bot of botnet) {
      run.enter(bot, 'tenant-a');
      run.leave(120);
    }
    now = 10;
    const flood: Entry[] = [];
    const served: Entry[] = [];
    for (let round = 0; round < 5; round++) {
      for (const bot of botnet) flood.push(run.enter(bot, 'tenant-a'));
      for (const client of CHEAP) served.push(run.enter(client, 'tenant-b'));
    }
    await settle();
    assert.equal(
      flood.filter((entry) => entry.state === 'running').length,
      2,
      "tenant A's expensive requests hold at most its share of the threads",
    );
    assert.equal(served.filter((entry) => entry.state === 'shed').length, 0, "no request of tenant B is shed for tenant A's flood");
    // Tenant B's requests run first as slots free up.
    const runningB = () => served.filter((entry) => entry.state === 'running').length;
    const before = runningB();
    for (let i = 0; i < 4; i++) {
      const ticket = run.held.find((t) => served.some((entry) => entry.ticket === t)) ?? run.held[0]!;
      run.held.splice(run.held.indexOf(ticket), 1);
      run.admission.charge(ticket, 1);
      run.admission.leave(ticket);
      await settle();
    }
    assert.ok(runningB() > before, "freed slots go to tenant B's waiting requests");
    assert.ok(
      served.every((entry) => entry.state !== 'shed'),
      'and none of them is shed',
    );
  });

  it('refuses an expensive client past its share while others need the threads; alone, or cheap, never', async () => {
    let now = 0;
    // 2 % of 2 threads: an allowance filled at 40 ms a second, holding 200 ms (the share of the 5 s window).
    const admission = new FairAdmission({
      slots: 8,
      queueLength: 8,
      maxWaitMs: 1000,
      expensiveClientShare: 0.02,
      threads: 2,
      now: () => now,
    });
    assert.equal(admission.allowanceMs, 200);
    const run = new Run(admission);
    /** One request a second from EXPENSIVE that costs 250 ms, for `seconds`: what became of each. */
    const expensiveSeconds = async (from: number, seconds: number): Promise<string[]> => {
      const verdicts: string[] = [];
      for (let second = from; second < from + seconds; second++) {
        now = second * 1000;
        const entry = run.enter(EXPENSIVE, 'a', 500_000);
        await settle();
        verdicts.push(entry.state);
        if (entry.state === 'running') {
          run.held.splice(run.held.indexOf(entry.ticket!), 1);
          admission.charge(entry.ticket!, 250);
          admission.leave(entry.ticket!);
        }
      }
      return verdicts;
    };
    // Alone, it uses what nobody else wants.
    assert.deepEqual(await expensiveSeconds(0, 5), Array(5).fill('running'));
    // Another client's request in flight: past its allowance, refused until it fills again.
    const other = run.enter(CHEAP[0]!, 'b');
    assert.equal(other.state, 'running');
    const verdicts = await expensiveSeconds(5, 20);
    const admitted = verdicts.filter((state) => state === 'running').length;
    assert.equal(verdicts[0], 'shed', 'its allowance is spent: refused');
    // What it may use: 40 ms a second for 20 s, and the overshoot of the last request admitted.
    assert.ok(admitted * 250 <= 800 + 250, `admitted ${admitted} of 20 (${verdicts.join(' ')})`);
    assert.ok(admitted >= 2, `it is served again as its allowance fills (${verdicts.join(' ')})`);
    // A client of cheap requests is never refused for cost, however many it sends.
    for (let i = 0; i < 2000; i++) {
      const entry = run.enter(CHEAP[1]!, 'a');
      assert.equal(entry.state, 'running');
      run.held.splice(run.held.indexOf(entry.ticket!), 1);
      admission.charge(entry.ticket!, 1);
      admission.leave(entry.ticket!);
    }
    // The other client's request ends; a minute later the others' recent cost has decayed: alone again.
    run.held.splice(run.held.indexOf(other.ticket!), 1);
    admission.leave(other.ticket!);
    now += 60_000;
    assert.deepEqual(await expensiveSeconds(now / 1000, 3), Array(3).fill('running'), 'a minute later, alone again: served');
    // A share of 1 is no cap.
    assert.equal(new FairAdmission({ slots: 1, queueLength: 0, maxWaitMs: 1, expensiveClientShare: 1 }).allowanceMs, Infinity);
    assert.throws(() => new FairAdmission({ slots: 1, queueLength: 0, maxWaitMs: 1, expensiveClientShare: 0 }), RangeError);
  });

  it('charges what a request cost to its client, decaying with time', () => {
    let now = 0;
    const admission = new FairAdmission({ slots: 1, queueLength: 1, maxWaitMs: 1000, costWindowMs: 1000, now: () => now });
    const ticket = admission.enter('2001:db8:0:1::5', 't') as AdmissionTicket;
    admission.charge(ticket, 50);
    admission.leave(ticket);
    assert.equal(admission.recentCostMs('2001:db8:0:1:ffff::9', 't'), 50, 'counted by /64');
    assert.equal(admission.recentCostMs('2001:db8:0:1::5', 'other tenant'), 0, 'within its tenant');
    now = 1000;
    assert.ok(Math.abs(admission.recentCostMs('2001:db8:0:1::5', 't') - 50 / Math.E) < 1e-9);
  });
});

describe('client key of the fair share', () => {
  it('is the IPv4 address, and an IPv6 address by /64', () => {
    assert.equal(clientKey('192.0.2.1'), '192.0.2.1');
    assert.equal(clientKey('::ffff:192.0.2.1'), '192.0.2.1');
    assert.equal(clientKey('2001:db8:0:1::5'), '2001:db8:0:1::/64');
    assert.equal(clientKey('2001:db8:0:1:ffff:1:2:3'), '2001:db8:0:1::/64');
    assert.equal(clientKey('::1'), '0:0:0:0::/64');
    assert.equal(clientKey('not an address'), 'not an address');
  });

  it('reads any spelling of an IPv6 address as the same eight groups (property)', () => {
    const group = fc.integer({ min: 0, max: 0xffff });
    fc.assert(
      fc.property(fc.array(group, { minLength: 8, maxLength: 8 }), fc.boolean(), (groups, upper) => {
        const full = groups.map((g) => g.toString(16).padStart(4, '0')).join(':');
        // The canonical (compressed) spelling, as a socket reports it.
        const compressed = new URL(`http://[${full}]/`).hostname.slice(1, -1);
        for (const spelling of [full, compressed]) {
          const text = upper ? spelling.toUpperCase() : spelling;
          assert.deepEqual(ipv6Groups(text), groups, text);
        }
        assert.equal(clientKey(compressed), clientKey(full));
      }),
    );
  });

  it('finds no groups in what is not an IPv6 address, and agrees with net.isIPv6 (property)', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[0-9a-fA-F:.]{0,45}$/), (text) => {
        const groups = ipv6Groups(text);
        if (groups !== undefined) assert.ok(net.isIPv6(text), text);
        else assert.ok(!net.isIPv6(text), text);
      }),
      { numRuns: 2000 },
    );
    assert.equal(ipv6Groups('1:2:3:4:5:6:7'), undefined);
    assert.equal(ipv6Groups('1::2::3'), undefined);
    assert.equal(ipv6Groups('1:2:3:4:5:6:7:8:9'), undefined);
  });
});
