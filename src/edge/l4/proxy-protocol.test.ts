import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeProxyHeader, encodeProxyV1, encodeProxyV2 } from './proxy-protocol.ts';
import { parseProxyHeader } from './test-support.ts';

const v4 = { sourceAddress: '192.0.2.10', sourcePort: 51234, destinationAddress: '198.51.100.1', destinationPort: 443 };
const v6 = { sourceAddress: '2001:db8::10', sourcePort: 51234, destinationAddress: '2001:db8:1::1', destinationPort: 443 };

describe('PROXY protocol version 1', () => {
  it('is one text line for IPv4', () => {
    assert.equal(encodeProxyV1(v4).toString('latin1'), 'PROXY TCP4 192.0.2.10 198.51.100.1 51234 443\r\n');
  });

  it('is one text line for IPv6', () => {
    assert.equal(encodeProxyV1(v6).toString('latin1'), 'PROXY TCP6 2001:db8::10 2001:db8:1::1 51234 443\r\n');
  });

  it('describes a dual-stack listener\'s IPv4-mapped ends as IPv4', () => {
    const mapped = { ...v4, sourceAddress: '::ffff:192.0.2.10', destinationAddress: '::ffff:198.51.100.1' };
    assert.equal(encodeProxyV1(mapped).toString('latin1'), 'PROXY TCP4 192.0.2.10 198.51.100.1 51234 443\r\n');
  });

  it('says UNKNOWN for ends that are not IP addresses', () => {
    assert.equal(encodeProxyV1({ ...v4, sourceAddress: '' }).toString('latin1'), 'PROXY UNKNOWN\r\n');
  });
});

describe('PROXY protocol version 2', () => {
  it('encodes TCP over IPv4 byte for byte as the specification lays out', () => {
    const header = encodeProxyV2(v4, 'TCP');
    assert.equal(
      header.toString('hex'),
      '0d0a0d0a000d0a515549540a' + // signature
        '21' + // version 2, PROXY
        '11' + // AF_INET, STREAM
        '000c' + // 12 address bytes
        'c000020a' + // 192.0.2.10
        'c6336401' + // 198.51.100.1
        'c822' + // 51234
        '01bb', // 443
    );
  });

  it('encodes UDP (DGRAM) over IPv4 and IPv6', () => {
    assert.equal(encodeProxyV2(v4, 'UDP')[13], 0x12);
    const header = encodeProxyV2(v6, 'UDP');
    assert.equal(header[13], 0x22);
    assert.equal(header.readUInt16BE(14), 36);
    assert.equal(header.length, 16 + 36);
  });

  it('is read back by an independent parser, for each family and transport', () => {
    for (const [addresses, transport, protocol] of [
      [v4, 'TCP', 'TCP4'],
      [v4, 'UDP', 'UDP4'],
      [v6, 'TCP', 'TCP6'],
      [v6, 'UDP', 'UDP6'],
    ] as const) {
      const parsed = parseProxyHeader(Buffer.concat([encodeProxyV2(addresses, transport), Buffer.from('payload')]));
      assert.deepEqual(parsed, { version: 2, command: 'PROXY', protocol, ...addresses, length: protocol.endsWith('4') ? 28 : 52 });
    }
  });

  it('maps an IPv4 end to IPv6 when the other end is IPv6', () => {
    const parsed = parseProxyHeader(encodeProxyV2({ ...v6, sourceAddress: '192.0.2.10' }, 'TCP'));
    assert.ok(typeof parsed === 'object');
    assert.equal(parsed.protocol, 'TCP6');
    assert.equal(parsed.sourceAddress, '::ffff:c000:20a');
  });

  it('sends LOCAL for ends that are not IP addresses', () => {
    const header = encodeProxyV2({ ...v4, destinationAddress: '/run/socket' }, 'TCP');
    assert.equal(header.length, 16);
    assert.equal(header[12], 0x20);
  });
});

describe('encodeProxyHeader', () => {
  it('uses version 2 for UDP even when version 1 is configured', () => {
    assert.equal(encodeProxyHeader(1, v4, 'TCP').subarray(0, 6).toString(), 'PROXY ');
    assert.equal(encodeProxyHeader(1, v4, 'UDP')[12], 0x21);
  });

  it('refuses a port out of range', () => {
    assert.throws(() => encodeProxyV1({ ...v4, sourcePort: 70000 }), RangeError);
  });
});
