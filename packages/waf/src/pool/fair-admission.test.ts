/**
 * Fair admission to the WAF's threads: a flooding client is shed before a benign one, waiting
 * requests start round robin across clients, a request that waits too long is shed, and an IPv6
 * client counts by its /64.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import fc from 'fast-check';
import { FairAdmission, clientKey, ipv6Groups } from './fair-admission.ts';
import { WafOverloadedError } from '../engine.ts';

const FLOODER = '198.51.100.7';
const BENIGN = '203.0.113.9';

interface Entry {
  client: string;
  state: 'running' | 'waiting' | 'shed';
  order?: number;
}

/** Enters `client` and records what becomes of the request. */
function enter(admission: FairAdmission, client: string, log: Entry[], started: string[]): Entry {
  const entry: Entry = { client, state: 'waiting' };
  log.push(entry);
  const waiting = admission.enter(client);
  if (waiting === undefined) {
    entry.state = 'running';
    started.push(client);
    return entry;
  }
  waiting.then(
    () => {
      entry.state = 'running';
      started.push(client);
    },
    (error: unknown) => {
      assert.ok(error instanceof WafOverloadedError);
      entry.state = 'shed';
    },
  );
  return entry;
}

const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('fair admission to the WAF threads', () => {
  it('takes free slots at once, without a promise', () => {
    const admission = new FairAdmission({ slots: 2, queueLength: 4, maxWaitMs: 1000 });
    assert.equal(admission.enter(FLOODER), undefined);
    assert.equal(admission.enter(BENIGN), undefined);
    assert.equal(admission.active, 2);
    admission.leave();
    assert.equal(admission.active, 1);
  });

  it('sheds a flooding client before a benign one, whatever the order of arrival', async () => {
    const admission = new FairAdmission({ slots: 2, queueLength: 8, maxWaitMs: 60_000 });
    const log: Entry[] = [];
    const started: string[] = [];
    for (let i = 0; i < 50; i++) enter(admission, FLOODER, log, started);
    const benign = [enter(admission, BENIGN, log, started), enter(admission, BENIGN, log, started), enter(admission, BENIGN, log, started)];
    for (let i = 0; i < 50; i++) enter(admission, FLOODER, log, started);
    await settle();
    assert.equal(admission.waiting, 8);
    assert.ok(
      benign.every((entry) => entry.state === 'waiting'),
      'every benign request has a place',
    );
    const flooderShed = log.filter((entry) => entry.client === FLOODER && entry.state === 'shed').length;
    assert.equal(flooderShed, 100 - 2 - 5, 'the flooder keeps the two slots and five places, and loses the rest');
    // The benign requests start before the flooder's waiting ones (round robin, one each turn).
    for (let i = 0; i < 6; i++) admission.leave();
    await settle();
    assert.deepEqual(started.slice(2, 8), [FLOODER, BENIGN, FLOODER, BENIGN, FLOODER, BENIGN]);
  });

  it('refuses the newest request of a client that holds as many places as the biggest', async () => {
    const admission = new FairAdmission({ slots: 1, queueLength: 2, maxWaitMs: 60_000 });
    const log: Entry[] = [];
    const started: string[] = [];
    enter(admission, 'a', log, started);
    const a1 = enter(admission, 'a', log, started);
    const b1 = enter(admission, 'b', log, started);
    const b2 = enter(admission, 'b', log, started); // b holds 1 = a's 1: refused itself
    const c1 = enter(admission, 'c', log, started); // c holds 0 < 1: takes the place of a's newest (the first biggest)
    await settle();
    assert.deepEqual([a1.state, b1.state, b2.state, c1.state], ['shed', 'waiting', 'shed', 'waiting']);
  });

  it('sheds everything past the slots when nothing may wait', async () => {
    const admission = new FairAdmission({ slots: 1, queueLength: 0, maxWaitMs: 1000 });
    assert.equal(admission.enter(BENIGN), undefined);
    await assert.rejects(admission.enter(BENIGN)!, WafOverloadedError);
  });

  it('sheds a request that waited longer than maxWaitMs, on a freed slot and on the sweep', async () => {
    let now = 0;
    const admission = new FairAdmission({ slots: 1, queueLength: 10, maxWaitMs: 100, now: () => now });
    const log: Entry[] = [];
    const started: string[] = [];
    enter(admission, 'a', log, started);
    const old = enter(admission, 'b', log, started);
    now = 50;
    const young = enter(admission, 'c', log, started);
    now = 120;
    admission.leave();
    await settle();
    assert.equal(old.state, 'shed');
    assert.equal(young.state, 'running');
    const late = enter(admission, 'd', log, started);
    now = 300;
    admission.sweep();
    await settle();
    assert.equal(late.state, 'shed');
    assert.equal(admission.waiting, 0);
    assert.equal(admission.active, 1);
  });

  it('keeps slots and waiting counts consistent under any sequence of arrivals and departures', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 6 }),
        fc.array(fc.oneof(fc.constantFrom('x', 'y', 'z', 'w'), fc.constant('leave')), { maxLength: 200 }),
        (slots, queueLength, steps) => {
          const admission = new FairAdmission({ slots, queueLength, maxWaitMs: 60_000 });
          let holding = 0;
          for (const step of steps) {
            if (step === 'leave') {
              if (holding === 0) continue;
              admission.leave();
              // A waiter takes the slot over (its promise resolves later): it counts as held now.
              holding = admission.active;
              continue;
            }
            const waiting = admission.enter(step);
            if (waiting === undefined) holding++;
            else waiting.catch(() => {});
            assert.ok(admission.active <= slots);
            assert.ok(admission.waiting <= queueLength);
            if (admission.waiting > 0) assert.equal(admission.active, slots);
          }
          admission.close(new Error('closed'));
        },
      ),
    );
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
