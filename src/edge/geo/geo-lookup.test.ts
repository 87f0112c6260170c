import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CidrTable } from './cidr-table.ts';
import { UNKNOWN_COUNTRY, loadGeoLookup, parseOverrides, sharedGeoLookup } from './geo-lookup.ts';

describe('geo lookup', () => {
  it('finds the country of public IPv4 and IPv6 addresses in the bundled MMDB', () => {
    const geo = sharedGeoLookup();
    assert.equal(geo.country('8.8.8.8'), 'US');
    assert.match(geo.country('2a00:1450:4001:80b::200e'), /^[A-Z]{2}$/);
    assert.equal(geo.country('::ffff:8.8.8.8'), 'US', 'an IPv4-mapped peer is its IPv4 address');
  });

  it('answers ZZ for addresses in no database: loopback, private, malformed', () => {
    const geo = sharedGeoLookup();
    assert.equal(geo.country('127.0.0.1'), UNKNOWN_COUNTRY);
    assert.equal(geo.country('10.1.2.3'), UNKNOWN_COUNTRY);
    assert.equal(geo.country('::1'), UNKNOWN_COUNTRY);
    assert.equal(geo.country('not an ip'), UNKNOWN_COUNTRY);
  });

  it('consults the operator overrides first; the most specific network wins', () => {
    const geo = loadGeoLookup({ overrides: '# test networks\n127.0.0.0/8,FR\n127.0.0.20/32, de\n8.8.8.0/24,GB\n2001:db8::/32,NL\n' });
    assert.equal(geo.country('127.0.0.20'), 'DE');
    assert.equal(geo.country('127.0.0.99'), 'FR');
    assert.equal(geo.country('8.8.8.8'), 'GB', 'overrides win over the MMDB');
    assert.equal(geo.country('8.8.4.4'), 'US');
    assert.equal(geo.country('2001:db8::1'), 'NL');
    assert.equal(geo.country('::ffff:127.0.0.20'), 'DE');
  });

  it('refuses a malformed overrides line, naming it', () => {
    assert.throws(() => parseOverrides('10.0.0.0/8,DE\n10.0.0.0/33,FR\n'), /line 2/);
    assert.throws(() => parseOverrides('10.0.0.0/8 DE\n'), /line 1: expected "CIDR,CC"/);
  });

  it('matches IPv6 networks with embedded IPv4 and compressed forms', () => {
    const table = new CidrTable<string>();
    table.add('::ffff:0:0/96', 'mapped');
    table.add('2001:db8:1::/48', 'doc');
    assert.equal(table.lookup('2001:db8:1:ffff::1'), 'doc');
    assert.equal(table.lookup('2001:db8:2::1'), undefined);
    assert.equal(table.lookup('0:0:0:0:0:ffff:102:304'), 'mapped');
  });
});
