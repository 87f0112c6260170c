import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { OriginPolicy, literalAddress, type OriginRefusalReason } from './origin-policy.ts';

const strict = new OriginPolicy({ allowedNetworks: [], ownHosts: [], ownListeners: [] });
const reasonOf = (policy: OriginPolicy, address: string, port = 80): OriginRefusalReason | 'allowed' => {
  const verdict = policy.check(address, port);
  return verdict.allowed ? 'allowed' : verdict.reason;
};

describe('origin policy: special-purpose addresses', () => {
  const cases: [string, OriginRefusalReason | 'allowed'][] = [
    // IPv4
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['169.254.0.1', 'link-local'],
    ['10.0.0.1', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'cgnat'],
    ['100.127.255.255', 'cgnat'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    // IPv6
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['fd00::1', 'private'],
    ['fc00::1', 'private'],
    ['fec0::1', 'private'],
    ['ff02::1', 'multicast'],
    ['64:ff9b:1::a00:1', 'private'],
    // IPv4 inside IPv6: judged by the IPv4 address
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:a9fe:a9fe', 'link-local'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:10.1.2.3', 'private'],
    ['::ffff:0.0.0.0', 'unspecified'],
    ['0:0:0:0:0:ffff:c0a8:0101', 'private'],
    ['::127.0.0.1', 'loopback'],
    ['::a9fe:a9fe', 'link-local'],
    ['::8.8.8.8', 'reserved'],
    ['64:ff9b::a9fe:a9fe', 'link-local'],
    ['64:ff9b::7f00:1', 'loopback'],
    ['2002:7f00:1::1', 'loopback'],
    ['2002:a9fe:a9fe::', 'link-local'],
    // public
    ['8.8.8.8', 'allowed'],
    ['172.32.0.1', 'allowed'],
    ['100.128.0.1', 'allowed'],
    ['169.255.0.1', 'allowed'],
    ['2606:4700:4700::1111', 'allowed'],
    ['::ffff:8.8.8.8', 'allowed'],
    ['64:ff9b::808:808', 'allowed'],
    ['2002:808:808::1', 'allowed'],
    // not an address at all
    ['example.com', 'not-an-address'],
    ['', 'not-an-address'],
  ];
  for (const [address, expected] of cases) {
    it(`${address || '(empty)'}: ${expected}`, () => assert.equal(reasonOf(strict, address), expected));
  }

  it('says what the address is in its detail', () => {
    const verdict = strict.check('169.254.169.254', 80);
    assert.equal(verdict.allowed, false);
    assert.match(verdict.allowed ? '' : verdict.detail, /169\.254\.169\.254 is a link-local address/);
  });
});

describe('origin policy: the operator opens networks, never the service itself', () => {
  const policy = new OriginPolicy({
    allowedNetworks: ['127.0.0.0/8', '10.0.0.0/8', 'fd00::/8'],
    ownHosts: ['127.0.0.2', '10.0.0.5', 'fd00::5'],
    ownListeners: [
      { address: '127.0.0.1', port: 8080 },
      { address: '127.0.0.1', port: 9464 },
    ],
  });

  it('allows addresses inside the allowed networks, IPv4-mapped spellings included', () => {
    assert.equal(reasonOf(policy, '127.0.0.9'), 'allowed');
    assert.equal(reasonOf(policy, '::ffff:127.0.0.9'), 'allowed');
    assert.equal(reasonOf(policy, '10.9.9.9'), 'allowed');
    assert.equal(reasonOf(policy, 'fd00::9'), 'allowed');
    assert.equal(reasonOf(policy, '192.168.0.1'), 'private', 'outside them, the classes still hold');
    assert.equal(reasonOf(policy, '::1'), 'loopback');
  });

  it('refuses own hosts at any port and own listeners at their port, in every spelling', () => {
    for (const port of [1, 80, 5432, 65535]) {
      assert.equal(reasonOf(policy, '127.0.0.2', port), 'own-listener');
      assert.equal(reasonOf(policy, '::ffff:7f00:2', port), 'own-listener');
      assert.equal(reasonOf(policy, '10.0.0.5', port), 'own-listener');
      assert.equal(reasonOf(policy, 'fd00:0:0::5', port), 'own-listener');
    }
    assert.equal(reasonOf(policy, '127.0.0.1', 8080), 'own-listener');
    assert.equal(reasonOf(policy, '::ffff:127.0.0.1', 9464), 'own-listener');
    assert.equal(reasonOf(policy, '64:ff9b::7f00:1', 8080), 'own-listener');
    assert.equal(reasonOf(policy, '127.0.0.1', 8081), 'allowed', 'the same address at another port is not the listener');
  });

  it('keeps own listeners refused even when every network is allowed', () => {
    const open = new OriginPolicy({
      allowedNetworks: ['0.0.0.0/0', '::/0'],
      ownHosts: ['127.0.0.2'],
      ownListeners: [{ address: '::1', port: 8080 }],
    });
    assert.equal(reasonOf(open, '127.0.0.2', 1234), 'own-listener');
    assert.equal(reasonOf(open, '::1', 8080), 'own-listener');
    assert.equal(reasonOf(open, '::1', 8081), 'allowed');
    assert.equal(reasonOf(open, '169.254.169.254'), 'allowed');
  });

  it('refuses settings that are not addresses or networks', () => {
    assert.throws(() => new OriginPolicy({ allowedNetworks: ['10.0.0.0/33'], ownHosts: [], ownListeners: [] }), /10\.0\.0\.0\/33/);
    assert.throws(() => new OriginPolicy({ allowedNetworks: [], ownHosts: ['db.internal'], ownListeners: [] }), /db\.internal/);
  });
});

describe('origin policy: property', () => {
  const ipv4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((octets) => octets.join('.'));
  const port = fc.integer({ min: 1, max: 65535 });

  it("an address inside an allowed network is allowed unless it is one of the service's own", () => {
    fc.assert(
      fc.property(
        ipv4,
        fc.integer({ min: 0, max: 32 }),
        ipv4,
        ipv4,
        port,
        port,
        (network, bits, candidate, own, ownPort, candidatePort) => {
          const policy = new OriginPolicy({
            allowedNetworks: [`${network}/${bits}`],
            ownHosts: [own],
            ownListeners: [{ address: network, port: ownPort }],
          });
          const inside = bits === 0 || ipv4ToNumber(candidate) >>> (32 - bits) === ipv4ToNumber(network) >>> (32 - bits);
          const isOwn = candidate === own || (candidate === network && candidatePort === ownPort);
          for (const spelling of [candidate, `::ffff:${candidate}`]) {
            const verdict = policy.check(spelling, candidatePort);
            if (isOwn) assert.equal(verdict.allowed ? 'allowed' : verdict.reason, 'own-listener', spelling);
            else if (inside) assert.equal(verdict.allowed, true, `${spelling} inside ${network}/${bits}`);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('without allowed networks, judges an IPv4 address and its mapped and NAT64 forms alike', () => {
    fc.assert(
      fc.property(ipv4, port, (address, p) => {
        const hex = ipv4ToNumber(address).toString(16).padStart(8, '0');
        const expected = reasonOf(strict, address, p);
        assert.equal(reasonOf(strict, `::ffff:${address}`, p), expected);
        assert.equal(reasonOf(strict, `::ffff:${hex.slice(0, 4)}:${hex.slice(4)}`, p), expected);
        assert.equal(reasonOf(strict, `64:ff9b::${address}`, p), expected);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('literalAddress', () => {
  it('reads IP literals, bracketed IPv6, and the legacy IPv4 spellings resolvers accept', () => {
    assert.equal(literalAddress('10.0.0.1'), '10.0.0.1');
    assert.equal(literalAddress('[::1]'), '::1');
    assert.equal(literalAddress('fe80::1%eth0'), 'fe80::1');
    assert.equal(literalAddress('127.1'), '127.0.0.1');
    assert.equal(literalAddress('0x7f.1'), '127.0.0.1');
    assert.equal(literalAddress('0177.0.0.1'), '127.0.0.1');
    assert.equal(literalAddress('2130706433'), '127.0.0.1');
    assert.equal(literalAddress('169.254.43518'), '169.254.169.254');
    assert.equal(literalAddress('0'), '0.0.0.0');
  });

  it('leaves names alone', () => {
    for (const name of ['example.com', 'origin.example', 'localhost', '1.2.3.4.example', 'a1', '256.256.256.256', '1.2.3.4.5']) {
      assert.equal(literalAddress(name), undefined, name);
    }
  });
});

function ipv4ToNumber(address: string): number {
  return address.split('.').reduce((value, octet) => value * 256 + Number(octet), 0);
}
