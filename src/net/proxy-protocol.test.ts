import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PROXY_V2_SIGNATURE, decodeProxyHeader, encodeProxyHeader, encodeProxyV1, encodeProxyV2 } from './proxy-protocol.ts';
import { parseProxyHeader } from '../../test/support/l4.ts';

const v4 = { sourceAddress: '192.0.2.10', sourcePort: 51234, destinationAddress: '198.51.100.1', destinationPort: 443 };
const v6 = { sourceAddress: '2001:db8::10', sourcePort: 51234, destinationAddress: '2001:db8:1::1', destinationPort: 443 };

describe('PROXY protocol version 1', () => {
  it('is one text line for IPv4', () => {
    assert.equal(encodeProxyV1(v4).toString('latin1'), 'PROXY TCP4 192.0.2.10 198.51.100.1 51234 443\r\n');
  });

  it('is one text line for IPv6', () => {
    assert.equal(encodeProxyV1(v6).toString('latin1'), 'PROXY TCP6 2001:db8::10 2001:db8:1::1 51234 443\r\n');
  });

  it("describes a dual-stack listener's IPv4-mapped ends as IPv4", () => {
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

describe('decodeProxyHeader (headers from a load balancer in front of the edge)', () => {
  const payload = Buffer.from('GET / HTTP/1.1\r\n\r\n');

  it('reads back what the encoders write, v1 and v2, IPv4 and IPv6, and says where the payload starts', () => {
    for (const [addresses, encoded] of [
      [v4, encodeProxyV1(v4)],
      [v6, encodeProxyV1(v6)],
      [v4, encodeProxyV2(v4, 'TCP')],
      [v6, encodeProxyV2(v6, 'TCP')],
    ] as const) {
      const decoded = decodeProxyHeader(Buffer.concat([encoded, payload]));
      assert.ok(typeof decoded === 'object', `decoded ${encoded.toString('hex')}`);
      assert.deepEqual(decoded.addresses, addresses);
      assert.equal(decoded.length, encoded.length);
    }
  });

  it('reads a v2 header with TLVs after the addresses (AWS NLB, GCP) and skips them', () => {
    const header = encodeProxyV2(v4, 'TCP');
    const tlv = Buffer.from([0x04, 0x00, 0x03, 0x61, 0x62, 0x63]); // PP2_TYPE_NOOP, 3 bytes
    const withTlv = Buffer.concat([header, tlv]);
    withTlv.writeUInt16BE(12 + tlv.length, 14);
    const decoded = decodeProxyHeader(Buffer.concat([withTlv, payload]));
    assert.ok(typeof decoded === 'object');
    assert.deepEqual(decoded.addresses, v4);
    assert.equal(decoded.length, withTlv.length);
  });

  it('gives IPv4 for IPv4-mapped sources and canonical IPv6 text', () => {
    const mapped = decodeProxyHeader(encodeProxyV2({ ...v6, sourceAddress: '::ffff:192.0.2.10' }, 'TCP'));
    assert.ok(typeof mapped === 'object');
    assert.equal(mapped.addresses?.sourceAddress, '192.0.2.10');
    const v1 = decodeProxyHeader(Buffer.from('PROXY TCP6 2001:DB8:0:0::10 ::ffff:198.51.100.1 1 2\r\n'));
    assert.ok(typeof v1 === 'object');
    assert.equal(v1.addresses?.sourceAddress, '2001:db8::10');
    assert.equal(v1.addresses?.destinationAddress, '198.51.100.1');
  });

  it('has no addresses for v1 UNKNOWN, v2 LOCAL (health checks) and v2 AF_UNSPEC', () => {
    for (const header of [
      Buffer.from('PROXY UNKNOWN\r\n'),
      Buffer.from('PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n'),
      encodeProxyV2({ ...v4, sourceAddress: '' }, 'TCP'),
      Buffer.concat([PROXY_V2_SIGNATURE, Buffer.from([0x21, 0x00, 0x00, 0x00])]),
    ]) {
      const decoded = decodeProxyHeader(Buffer.concat([header, payload]));
      assert.ok(typeof decoded === 'object', header.toString('latin1'));
      assert.equal(decoded.addresses, undefined);
      assert.equal(decoded.length, header.length);
    }
  });

  it('asks for more bytes while the data is a prefix of a header, decides as soon as it cannot be one', () => {
    const v1 = encodeProxyV1(v4);
    const v2 = encodeProxyV2(v6, 'TCP');
    for (const header of [v1, v2]) {
      for (let n = 0; n < header.length; n++) assert.equal(decodeProxyHeader(header.subarray(0, n)), 'incomplete', `${n} bytes`);
    }
    assert.equal(decodeProxyHeader(Buffer.from('GET / HTTP/1.1\r\n')), 'none');
    assert.equal(decodeProxyHeader(Buffer.from('PRIX')), 'none');
    assert.equal(decodeProxyHeader(Buffer.from([0x16, 0x03, 0x01])), 'none', 'a TLS ClientHello');
    assert.equal(decodeProxyHeader(Buffer.from([0x0d, 0x0a, 0x0d, 0x0b])), 'none');
  });

  it('refuses malformed headers instead of reading half of them', () => {
    const invalid = [
      'PROXY TCP4 192.0.2.10 198.51.100.1 51234\r\n', // a field short
      'PROXY TCP4 192.0.2.10 198.51.100.1 51234 443 x\r\n', // one too many
      'PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n', // family mismatch
      'PROXY TCP6 192.0.2.10 2001:db8::1 1 2\r\n',
      'PROXY TCP4 192.0.2.300 198.51.100.1 1 2\r\n',
      'PROXY TCP4 192.0.2.10 198.51.100.1 65536 2\r\n',
      'PROXY TCP4 192.0.2.10 198.51.100.1 080 2\r\n', // leading zero
      'PROXY TCP4 192.0.2.10 198.51.100.1 -1 2\r\n',
      'PROXY TCP4  192.0.2.10 198.51.100.1 1 2\r\n', // double space
      'PROXY TCP4 192.0.2.10 198.51.100.1 1 2\n', // LF without CR
      'PROXY UDP4 192.0.2.10 198.51.100.1 1 2\r\n',
      'PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n',
      `PROXY TCP4 ${'1'.repeat(120)}`, // no CRLF within 107 bytes
    ];
    for (const text of invalid) assert.equal(decodeProxyHeader(Buffer.from(text, 'latin1')), 'invalid', JSON.stringify(text));

    const v2 = encodeProxyV2(v4, 'TCP');
    const badVersion = Buffer.from(v2);
    badVersion[12] = 0x11; // version 1 in a v2 header
    const badCommand = Buffer.from(v2);
    badCommand[12] = 0x22;
    const shortAddresses = Buffer.from(v2.subarray(0, 16 + 8));
    shortAddresses.writeUInt16BE(8, 14); // AF_INET needs 12
    const badFamily = Buffer.from(v2);
    badFamily[13] = 0x41;
    for (const header of [badVersion, badCommand, shortAddresses, badFamily])
      assert.equal(decodeProxyHeader(header), 'invalid', header.toString('hex'));
  });
});
