import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MessageChannel } from 'node:worker_threads';
import { IpSet, parseIpInto, parsePrefixInto, type SharedIpSet } from './ip-set.ts';
import { uint32s } from '@tps/waf-conformance';

function words(ip: string): number[] | undefined {
  const out = new Uint32Array(4);
  return parseIpInto(ip, out) === 0 ? undefined : [...out];
}

describe('parseIpInto', () => {
  it('reads IPv4 into the IPv4-mapped part of the 128-bit space', () => {
    assert.deepEqual(words('192.0.2.1'), [0, 0, 0xffff, 0xc0000201]);
    assert.deepEqual(words('255.255.255.255'), [0, 0, 0xffff, 0xffffffff]);
    assert.deepEqual(words('::ffff:192.0.2.1'), words('192.0.2.1'));
  });

  it('reads IPv6 in all its spellings', () => {
    assert.deepEqual(words('2001:db8::1'), [0x20010db8, 0, 0, 1]);
    assert.deepEqual(words('2001:DB8:0:0:0:0:0:1'), [0x20010db8, 0, 0, 1]);
    assert.deepEqual(words('::'), [0, 0, 0, 0]);
    assert.deepEqual(words('::1'), [0, 0, 0, 1]);
    assert.deepEqual(words('1::'), [0x00010000, 0, 0, 0]);
    assert.deepEqual(words('1:2:3:4:5:6:7::'), [0x00010002, 0x00030004, 0x00050006, 0x00070000]);
    assert.deepEqual(words('fe80::1%eth0'), [0xfe800000, 0, 0, 1]);
    assert.deepEqual(words('::ffff:0:1.2.3.4'), [0, 0, 0xffff0000, 0x01020304]);
  });

  it('refuses what is not an address', () => {
    for (const bad of [
      '',
      '1',
      '1.2.3',
      '1.2.3.4.5',
      '256.1.1.1',
      '1..2.3',
      'a.b.c.d',
      '1.2.3.4 ',
      ':',
      ':1',
      '1:',
      '1:::2',
      '1::2::3',
      '1:2:3:4:5:6:7:8:9',
      '12345::',
      'g::',
      '1:2:3:4:5:6:7:1.2.3.4',
      'example.com',
    ]) {
      assert.equal(words(bad), undefined, bad);
    }
  });
});

describe('parsePrefixInto', () => {
  it('reads CIDRs and clears host bits below the prefix', () => {
    const out = new Uint32Array(4);
    assert.deepEqual(parsePrefixInto('192.0.2.77/24', out), { family: 4, length: 24 });
    assert.deepEqual([...out], [0, 0, 0xffff, 0xc0000200]);
    assert.deepEqual(parsePrefixInto('2001:db8:ffff::/32', out), { family: 6, length: 32 });
    assert.deepEqual([...out], [0x20010db8, 0, 0, 0]);
    assert.deepEqual(parsePrefixInto('198.51.100.1', out), { family: 4, length: 32 });
    for (const bad of ['1.2.3.4/33', '2001:db8::/129', '1.2.3.4/', '1.2.3.4/x', '/24']) {
      assert.equal(parsePrefixInto(bad, out), undefined, bad);
    }
  });
});

describe('IpSet', () => {
  it('answers membership for IPv4 and IPv6 networks and single addresses', () => {
    const set = new IpSet();
    assert.ok(set.add('192.0.2.0/24'));
    assert.ok(set.add('198.51.100.7'));
    assert.ok(set.add('2001:db8::/32'));
    assert.equal(set.add('not-an-ip'), false);
    assert.equal(set.size, 3);
    assert.ok(set.has('192.0.2.0'));
    assert.ok(set.has('192.0.2.255'));
    assert.ok(!set.has('192.0.3.0'));
    assert.ok(!set.has('192.0.1.255'));
    assert.ok(set.has('198.51.100.7'));
    assert.ok(!set.has('198.51.100.6'));
    assert.ok(set.has('2001:db8:1234::5'));
    assert.ok(!set.has('2001:db9::'));
    assert.ok(!set.has('garbage'));
  });

  it('matches IPv4-mapped IPv6 clients against IPv4 entries', () => {
    const set = new IpSet();
    set.add('203.0.113.0/25');
    assert.ok(set.has('::ffff:203.0.113.9'));
    assert.ok(!set.has('::ffff:203.0.113.200'));
  });

  it('keeps only the covering prefix when prefixes nest, in either order', () => {
    const set = new IpSet();
    set.add('10.1.2.3');
    set.add('10.1.2.0/24');
    set.add('10.1.0.0/16');
    set.add('10.1.9.0/24');
    assert.equal(set.size, 1);
    assert.ok(set.has('10.1.200.1'));
    set.add('10.0.0.0/8');
    set.add('11.0.0.0/8');
    assert.equal(set.size, 2);
    assert.ok(!set.has('12.0.0.1'));
  });

  it('a /0 covers its whole family only', () => {
    const v4 = new IpSet();
    v4.add('0.0.0.0/0');
    assert.ok(v4.has('1.2.3.4'));
    assert.ok(!v4.has('2001:db8::1'));
    const all = new IpSet();
    all.add('::/0');
    assert.ok(all.has('1.2.3.4'));
    assert.ok(all.has('2001:db8::1'));
  });

  it('agrees with a per-length reference on 500,000 entries', () => {
    const random = uint32s(20240601);
    const set = new IpSet();
    // Reference: for each prefix length, the set of networks of that length.
    const v4ByLength = new Map<number, Set<number>>();
    const v6ByLength = new Map<number, Set<bigint>>();
    const v4Entries: Array<[number, number]> = [];
    const v6Entries: Array<[bigint, number]> = [];
    for (let i = 0; i < 450_000; i++) {
      const r = random() % 100;
      const length = r < 70 ? 32 : r < 90 ? 24 : r < 98 ? 20 + (random() % 12) : 12 + (random() % 8);
      const network = mask4(random(), length);
      set.add(`${ipv4Text(network)}/${length}`);
      addTo(v4ByLength, length, network);
      v4Entries.push([network, length]);
    }
    for (let i = 0; i < 50_000; i++) {
      const length = [32, 48, 56, 64, 128][random() % 5]!;
      const network = mask6(randomV6(random), length);
      set.add(`${ipv6Text(network)}/${length}`);
      addTo(v6ByLength, length, network);
      v6Entries.push([network, length]);
    }
    const listed4 = (ip: number) => [...v4ByLength].some(([length, nets]) => nets.has(mask4(ip, length)));
    const listed6 = (ip: bigint) => [...v6ByLength].some(([length, nets]) => nets.has(mask6(ip, length)));

    let checked = 0;
    let positives = 0;
    const check = (text: string, expected: boolean) => {
      assert.equal(set.has(text), expected, `${text} expected ${expected}`);
      checked++;
      if (expected) positives++;
    };
    // Every 10th entry: its first and last address are in; just outside it is what the reference says.
    for (let i = 0; i < v4Entries.length; i += 10) {
      const [network, length] = v4Entries[i]!;
      const last = (network + 2 ** (32 - length) - 1) >>> 0;
      check(ipv4Text(network), true);
      check(`::ffff:${ipv4Text(last)}`, true);
      const after = (last + 1) >>> 0;
      check(ipv4Text(after), listed4(after));
    }
    for (let i = 0; i < v6Entries.length; i += 10) {
      const [network, length] = v6Entries[i]!;
      const last = network | ((1n << BigInt(128 - length)) - 1n);
      check(ipv6Text(network), true);
      check(ipv6Text(last), true);
      const after = (last + 1n) & ((1n << 128n) - 1n);
      check(ipv6Text(after), listed6(after));
    }
    // Random probes, mostly misses.
    for (let i = 0; i < 100_000; i++) {
      const ip = random();
      check(ipv4Text(ip), listed4(ip));
    }
    for (let i = 0; i < 20_000; i++) {
      const ip = randomV6(random);
      check(ipv6Text(ip), listed6(ip));
    }
    assert.ok(checked > 200_000 && positives > 100_000);
  });
});

describe('IpSet in shared memory', () => {
  /** Entries and probes around them: IPv4, IPv6, IPv4-mapped spellings, nested CIDRs, /0 of IPv4. */
  function fixture(extraV4: number): { set: IpSet; probes: string[] } {
    const random = uint32s(7);
    const set = new IpSet();
    const probes: string[] = ['0.0.0.0', '255.255.255.255', '::', '::1', '2001:db8::1', 'garbage', '::ffff:0:1.2.3.4'];
    const entries = [
      '192.0.2.0/24',
      '192.0.2.128/25',
      '198.51.100.7',
      '203.0.113.0/28',
      '2001:db8::/32',
      '2001:db8:1::/48',
      '2001:db8:ffff::1/128',
      'fe80::/10',
      '::ffff:100.64.0.0/106',
      '10.0.0.0/8',
      '10.1.2.3',
    ];
    for (let i = 0; i < extraV4; i++) {
      const length = [32, 24, 20, 16][random() % 4]!;
      entries.push(`${ipv4Text(mask4(random(), length))}/${length}`);
    }
    for (let i = 0; i < extraV4 / 10; i++) entries.push(`${ipv6Text(mask6(randomV6(random), 64))}/64`);
    for (const entry of entries) {
      assert.ok(set.add(entry), entry);
      const [address] = entry.split('/') as [string];
      probes.push(address);
      if (!address.includes(':')) probes.push(`::ffff:${address}`);
    }
    for (let i = 0; i < 20_000; i++) {
      const ip = ipv4Text(random());
      probes.push(ip, `::ffff:${ip}`);
    }
    for (let i = 0; i < 5_000; i++) probes.push(ipv6Text(randomV6(random)));
    for (const near of [
      '192.0.2.255',
      '192.0.3.0',
      '198.51.100.6',
      '203.0.113.15',
      '203.0.113.16',
      '100.64.0.1',
      '100.128.0.0',
      '2001:db9::',
      'fe80::1',
      'fec0::1',
    ]) {
      probes.push(near);
    }
    return { set, probes };
  }

  function assertSameAnswers(original: IpSet, view: IpSet, probes: string[]): void {
    let positives = 0;
    for (const probe of probes) {
      const expected = original.has(probe);
      assert.equal(view.has(probe), expected, probe);
      if (expected) positives++;
    }
    assert.equal(view.size, original.size);
    assert.ok(positives > 50, `only ${positives} listed probes`);
  }

  for (const [name, extra] of [
    ['a small set (no IPv4 start table)', 40],
    ['a large set (with the IPv4 start table)', 20_000],
  ] as const) {
    it(`gives the same answers as the original set for ${name}`, () => {
      const { set, probes } = fixture(extra);
      const shared = set.toShared();
      assert.ok(shared.nodes instanceof SharedArrayBuffer && shared.keys instanceof SharedArrayBuffer);
      assert.equal(shared.ipv4Start !== null, extra > 1000, 'the start table travels with a large set');
      const view = IpSet.fromShared(shared);
      assert.ok(view.isShared && !set.isShared);
      assertSameAnswers(set, view, probes);
      // A view does not copy: exporting it again gives the very same memory.
      assert.equal(view.toShared(), shared);
    });
  }

  it('crosses threads by postMessage without a copy, and the view is read-only', async () => {
    const { set, probes } = fixture(2_000);
    const shared = set.toShared();
    const { port1, port2 } = new MessageChannel();
    const received = new Promise<SharedIpSet>((resolve) => port2.once('message', resolve));
    port1.postMessage(shared);
    const arrived = await received;
    port1.close();
    assert.notEqual(arrived.nodes, shared.nodes, 'a new buffer object...');
    // ...over the same memory: a byte written through one is read through the other.
    const before = new Uint8Array(arrived.keys)[0]!;
    new Uint8Array(shared.keys)[0] = before ^ 0xff;
    assert.equal(new Uint8Array(arrived.keys)[0], before ^ 0xff);
    new Uint8Array(shared.keys)[0] = before;
    const view = IpSet.fromShared(arrived);
    assertSameAnswers(set, view, probes);
    assert.throws(() => view.add('192.0.2.1'), /read-only/);
    assert.throws(() => IpSet.fromShared({ ...arrived, nodeCount: arrived.nodeCount + 1 }), RangeError);
  });
});

function addTo<T>(map: Map<number, Set<T>>, length: number, network: T): void {
  let nets = map.get(length);
  if (nets === undefined) map.set(length, (nets = new Set()));
  nets.add(network);
}

function mask4(ip: number, length: number): number {
  // A shift by 32 is a shift by 0 in JavaScript, hence both ends apart.
  return length === 0 ? 0 : length === 32 ? ip >>> 0 : (ip & ~(0xffffffff >>> length)) >>> 0;
}

function mask6(ip: bigint, length: number): bigint {
  const hostBits = BigInt(128 - length);
  return (ip >> hostBits) << hostBits;
}

function randomV6(random: () => number): bigint {
  // Mostly inside 2001:db8::/32 so that probes hit entries, the rest anywhere in 2000::/3.
  const top = random() % 4 === 0 ? 0x2000_0000 | (random() & 0x1fff_ffff) : 0x2001_0db8;
  return (BigInt(top) << 96n) | (BigInt(random() % 8) << 64n) | (BigInt(random()) << 32n) | BigInt(random());
}

function ipv4Text(ip: number): string {
  return `${ip >>> 24}.${(ip >>> 16) & 255}.${(ip >>> 8) & 255}.${ip & 255}`;
}

function ipv6Text(ip: bigint): string {
  const groups: string[] = [];
  for (let shift = 112n; shift >= 0n; shift -= 16n) groups.push(((ip >> shift) & 0xffffn).toString(16));
  return groups.join(':');
}
