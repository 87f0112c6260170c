import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ClientAddressPolicy, invalidCidrs, parseForwardedEntry } from './client-address.ts';

const policy = new ClientAddressPolicy({ trustedProxies: ['10.0.0.0/8', '192.0.2.1', '2001:db8:aa::/48'], listenerProxyProtocol: 'off' });
/** A socket object without a PROXY header recorded. */
const socket = {};

describe('ClientAddressPolicy', () => {
  it('trusts the listed networks only, IPv4-mapped peers included', () => {
    assert.equal(policy.trusts('10.1.2.3'), true);
    assert.equal(policy.trusts('::ffff:10.1.2.3'), true);
    assert.equal(policy.trusts('192.0.2.1'), true);
    assert.equal(policy.trusts('192.0.2.2'), false);
    assert.equal(policy.trusts('2001:db8:aa::7'), true);
    assert.equal(policy.trusts('2001:db8:ab::7'), false);
    assert.equal(policy.trusts('not an address'), false);
  });

  it('is absent without trusted networks: the socket peer is then always the client', () => {
    assert.equal(ClientAddressPolicy.from({ trustedProxies: [], listenerProxyProtocol: 'off' }), undefined);
    assert.equal(ClientAddressPolicy.from(undefined), undefined);
    assert.ok(ClientAddressPolicy.from({ trustedProxies: ['10.0.0.0/8'], listenerProxyProtocol: 'off' }));
  });

  it('refuses an entry that is not an address or CIDR', () => {
    assert.throws(() => new ClientAddressPolicy({ trustedProxies: ['10.0.0.0/33'], listenerProxyProtocol: 'off' }), /10\.0\.0\.0\/33/);
    assert.deepEqual(invalidCidrs(['10.0.0.0/8', ' 2001:db8::/32 ', 'lb.example.com', '10.0.0.0/', '1.2.3.4/-1']), [
      'lb.example.com',
      '10.0.0.0/',
      '1.2.3.4/-1',
    ]);
  });

  it('reads PROXY headers only when the setting is on, and only from trusted peers', () => {
    const on = new ClientAddressPolicy({ trustedProxies: ['10.0.0.0/8'], listenerProxyProtocol: 'optional' });
    assert.equal(on.readsProxyHeader('10.0.0.1'), true);
    assert.equal(on.readsProxyHeader('203.0.113.9'), false);
    assert.equal(policy.readsProxyHeader('10.0.0.1'), false);
  });
});

describe('X-Forwarded-For from a trusted peer', () => {
  const resolve = (peer: string, forwardedFor: string | undefined) => policy.resolveRequest(peer, 40000, socket, forwardedFor);

  it('is ignored from an untrusted peer, whatever it says', () => {
    assert.equal(resolve('203.0.113.9', '198.51.100.7'), undefined);
    assert.equal(resolve('203.0.113.9', '10.0.0.1'), undefined);
  });

  it('names the client: the last entry when it is not trusted', () => {
    assert.deepEqual(resolve('10.0.0.5', '198.51.100.7'), {
      ip: '198.51.100.7',
      port: 0,
      source: 'x-forwarded-for',
      forwardedForBefore: '',
    });
  });

  it('walks right to left over trusted hops (CDN -> load balancer -> edge) to the first untrusted entry', () => {
    assert.deepEqual(resolve('10.0.0.5', 'spoofed, 198.51.100.7, 192.0.2.1,10.9.9.9'), {
      ip: '198.51.100.7',
      port: 0,
      source: 'x-forwarded-for',
      forwardedForBefore: 'spoofed',
    });
  });

  it('never goes left of the first untrusted entry: what the client wrote itself stays data', () => {
    const resolved = resolve('10.0.0.5', '1.1.1.1, 2.2.2.2, 198.51.100.7');
    assert.equal(resolved?.ip, '198.51.100.7');
    assert.equal(resolved?.forwardedForBefore, '1.1.1.1, 2.2.2.2');
  });

  it('takes the leftmost entry when every entry is trusted', () => {
    assert.deepEqual(resolve('10.0.0.5', '10.0.0.7, 192.0.2.1'), {
      ip: '10.0.0.7',
      port: 0,
      source: 'x-forwarded-for',
      forwardedForBefore: '',
    });
  });

  it('stops at an entry that is not an address: the last trusted hop is the client', () => {
    assert.deepEqual(resolve('10.0.0.5', '198.51.100.7, unknown, 10.0.0.6'), {
      ip: '10.0.0.6',
      port: 0,
      source: 'x-forwarded-for',
      forwardedForBefore: '198.51.100.7, unknown',
    });
    // Not even the last entry is an address: the peer is the client.
    assert.equal(resolve('10.0.0.5', '198.51.100.7, garbage'), undefined);
    assert.equal(resolve('10.0.0.5', '198.51.100.7,'), undefined);
    assert.equal(resolve('10.0.0.5', ''), undefined);
    assert.equal(resolve('10.0.0.5', undefined), undefined);
  });

  it('reads ports and IPv6 forms, and gives one spelling per client', () => {
    assert.deepEqual(resolve('10.0.0.5', '198.51.100.7:4711'), {
      ip: '198.51.100.7',
      port: 4711,
      source: 'x-forwarded-for',
      forwardedForBefore: '',
    });
    assert.equal(resolve('10.0.0.5', '[2001:DB8::0:7]:443')?.ip, '2001:db8::7');
    assert.equal(resolve('10.0.0.5', '2001:db8:0::7')?.ip, '2001:db8::7');
    assert.equal(resolve('10.0.0.5', '::ffff:198.51.100.7')?.ip, '198.51.100.7');
    assert.equal(resolve('::ffff:10.0.0.5', '198.51.100.7')?.ip, '198.51.100.7', 'a dual-stack peer');
    assert.equal(resolve('2001:db8:0::1', '198.51.100.7'), undefined, 'an IPv6 peer outside the list');
  });
});

describe('parseForwardedEntry', () => {
  it('accepts addresses with optional ports and surrounding spaces', () => {
    assert.deepEqual(parseForwardedEntry(' 192.0.2.7 '), { ip: '192.0.2.7', port: 0 });
    assert.deepEqual(parseForwardedEntry('192.0.2.7:80'), { ip: '192.0.2.7', port: 80 });
    assert.deepEqual(parseForwardedEntry('[::1]'), { ip: '::1', port: 0 });
    assert.deepEqual(parseForwardedEntry('[::1]:8080'), { ip: '::1', port: 8080 });
    assert.deepEqual(parseForwardedEntry('0:0:0:0:0:ffff:c000:207'), { ip: '192.0.2.7', port: 0 });
  });

  it('refuses what is not one address', () => {
    for (const entry of [
      '',
      'unknown',
      '_hidden',
      '192.0.2.7:99999',
      '192.0.2.7:',
      '[::1',
      '[::1]x',
      'fe80::1%eth0',
      '192.0.2.7 192.0.2.8',
      '"192.0.2.7"',
    ]) {
      assert.equal(parseForwardedEntry(entry), undefined, entry);
    }
  });
});
