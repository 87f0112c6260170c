import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { addElementLine, createTableScript, deleteElementLine, deleteTableScript, elementText, parseCounters } from './ruleset.ts';

describe('kernel-blocking ruleset', () => {
  it('touches the table inet tps alone: created after deleting a leftover one, deleted whole', () => {
    const create = createTableScript();
    assert.match(create, /^table inet tps \{\}\ndelete table inet tps\ntable inet tps \{/);
    for (const line of create.split('\n')) assert.doesNotMatch(line, /\b(flush ruleset|table (?!inet tps\b))/);
    assert.equal(deleteTableScript(), 'table inet tps {}\ndelete table inet tps\n');
  });

  it('writes elements with their timeout, an IPv6 source as its prefix, a wildcard front end as /0', () => {
    const v4 = { family: 4 as const, protocol: 'tcp' as const, source: '192.0.2.7', destination: '198.51.100.1', port: 443 };
    assert.equal(addElementLine(v4, 2_500.2), 'add element inet tps blocked_ipv4 { tcp . 192.0.2.7 . 198.51.100.1 . 443 timeout 2501ms }');
    assert.equal(deleteElementLine(v4), 'delete element inet tps blocked_ipv4 { tcp . 192.0.2.7 . 198.51.100.1 . 443 }');
    const v6 = { family: 6 as const, protocol: 'udp' as const, source: '2001:db8:1:2:0:0:0:0/64', destination: '::/0', port: 53 };
    assert.equal(elementText(v6), 'udp . 2001:db8:1:2:0:0:0:0/64 . ::/0 . 53');
  });

  it('refuses anything that is not an address, a prefix, a port or a protocol: the text becomes an nft command', () => {
    const base = { family: 4 as const, protocol: 'tcp' as const, source: '192.0.2.7', destination: '198.51.100.1', port: 443 };
    const bad = [
      { ...base, source: '192.0.2.7 } ; flush ruleset ; add element inet tps blocked_ipv4 {' },
      { ...base, source: '192.0.2.7/33' },
      { ...base, source: '2001:db8::1' },
      { ...base, destination: 'example.com' },
      { ...base, destination: '198.51.100.1/x' },
      { ...base, port: 0 },
      { ...base, port: 65536 },
      { ...base, port: 1.5 },
      { ...base, protocol: 'icmp' as unknown as 'tcp' },
      { ...base, family: 6 as const, source: '2001:db8::/129', destination: '::1' },
    ];
    for (const element of bad) assert.throws(() => elementText(element), Error, JSON.stringify(element));
  });

  it('reads the drop counters from nft -j', () => {
    const json = JSON.stringify({
      nftables: [
        { metainfo: { version: '1.0.6' } },
        { counter: { family: 'inet', name: 'dropped_ipv4', table: 'tps', packets: 12, bytes: 720 } },
        { counter: { family: 'inet', name: 'dropped_ipv6', table: 'tps', packets: 3, bytes: 240 } },
      ],
    });
    assert.deepEqual(parseCounters(json), { 4: 12, 6: 3 });
  });
});
