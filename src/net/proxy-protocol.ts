/**
 * PROXY protocol headers (https://www.haproxy.org/download/2.6/doc/proxy-protocol.txt): those the
 * proxy sends to the origin so that it learns the client's real address and port, and the decoder
 * of those a load balancer in front of the edge sends to it (`decodeProxyHeader`).
 *
 * - Version 1: one text line, `PROXY TCP4 <src> <dst> <srcport> <dstport>\r\n`. TCP only.
 * - Version 2: a 16-byte binary preamble plus the addresses. TCP (STREAM) and UDP (DGRAM); for UDP
 *   the header is prepended to every datagram, as HAProxy and nginx do.
 *
 * A connection whose two ends are IPv4-mapped IPv6 addresses (a dual-stack listener) is described as
 * IPv4, which is what it is on the wire.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { normalizeIp } from './ip.ts';
import { parseIpInto } from './ip-set.ts';

export type ProxyProtocolVersion = 1 | 2;
export type ProxyTransport = 'TCP' | 'UDP';

export interface ProxiedAddresses {
  /** The client: the address and port the proxy accepted from. */
  sourceAddress: string;
  sourcePort: number;
  /** The proxy's front-end address and port the client reached. */
  destinationAddress: string;
  destinationPort: number;
}

/** The 12-byte signature that opens every version 2 header. */
export const PROXY_V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

const V2_VERSION_PROXY = 0x21; // version 2, command PROXY
const V2_VERSION_LOCAL = 0x20; // version 2, command LOCAL (no addresses)
const V2_AF_INET = 0x10;
const V2_AF_INET6 = 0x20;
const V2_STREAM = 0x01;
const V2_DGRAM = 0x02;

const scratch = new Uint32Array(4);

/** Both ends as one family: IPv4 when both are IPv4 (or IPv4-mapped), else IPv6 (IPv4 ends mapped). */
function normalize(addresses: ProxiedAddresses): { family: 4 | 6; source: string; destination: string } | undefined {
  const source = unmapIpv4(addresses.sourceAddress);
  const destination = unmapIpv4(addresses.destinationAddress);
  const sourceIs4 = isIPv4(source);
  const destinationIs4 = isIPv4(destination);
  if (sourceIs4 && destinationIs4) return { family: 4, source, destination };
  if (!(sourceIs4 || isIPv6(source)) || !(destinationIs4 || isIPv6(destination))) return undefined;
  return {
    family: 6,
    source: sourceIs4 ? `::ffff:${source}` : source,
    destination: destinationIs4 ? `::ffff:${destination}` : destination,
  };
}

function unmapIpv4(address: string): string {
  return address.length > 7 && address.slice(0, 7).toLowerCase() === '::ffff:' && isIPv4(address.slice(7)) ? address.slice(7) : address;
}

function assertPort(port: number): void {
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`not a port: ${port}`);
}

/**
 * A version 1 header. Addresses that are not IP addresses (for example a Unix socket) give the
 * `PROXY UNKNOWN` line, with which the origin uses the connection's own addresses.
 */
export function encodeProxyV1(addresses: ProxiedAddresses): Buffer {
  assertPort(addresses.sourcePort);
  assertPort(addresses.destinationPort);
  const ends = normalize(addresses);
  if (ends === undefined) return Buffer.from('PROXY UNKNOWN\r\n', 'latin1');
  const protocol = ends.family === 4 ? 'TCP4' : 'TCP6';
  return Buffer.from(
    `PROXY ${protocol} ${ends.source} ${ends.destination} ${addresses.sourcePort} ${addresses.destinationPort}\r\n`,
    'latin1',
  );
}

/**
 * A version 2 header for a TCP connection or a UDP flow. Addresses that are not IP addresses give a
 * LOCAL header (no addresses), with which the origin uses the connection's own addresses.
 */
export function encodeProxyV2(addresses: ProxiedAddresses, transport: ProxyTransport): Buffer {
  assertPort(addresses.sourcePort);
  assertPort(addresses.destinationPort);
  const ends = normalize(addresses);
  if (ends === undefined) {
    const local = Buffer.alloc(16);
    PROXY_V2_SIGNATURE.copy(local, 0);
    local[12] = V2_VERSION_LOCAL;
    local[13] = 0; // AF_UNSPEC, UNSPEC
    local.writeUInt16BE(0, 14);
    return local;
  }
  const addressBytes = ends.family === 4 ? 12 : 36;
  const header = Buffer.alloc(16 + addressBytes);
  PROXY_V2_SIGNATURE.copy(header, 0);
  header[12] = V2_VERSION_PROXY;
  header[13] = (ends.family === 4 ? V2_AF_INET : V2_AF_INET6) | (transport === 'TCP' ? V2_STREAM : V2_DGRAM);
  header.writeUInt16BE(addressBytes, 14);
  let offset = 16;
  const addressLength = ends.family === 4 ? 4 : 16;
  offset = writeAddress(header, offset, ends.source, addressLength);
  offset = writeAddress(header, offset, ends.destination, addressLength);
  header.writeUInt16BE(addresses.sourcePort, offset);
  header.writeUInt16BE(addresses.destinationPort, offset + 2);
  return header;
}

function writeAddress(target: Buffer, offset: number, address: string, length: 4 | 16): number {
  parseIpInto(address, scratch);
  if (length === 4) {
    target.writeUInt32BE(scratch[3]!, offset);
  } else {
    for (let w = 0; w < 4; w++) target.writeUInt32BE(scratch[w]!, offset + 4 * w);
  }
  return offset + length;
}

/** The header of the given version; UDP always gets version 2 (version 1 has no UDP). */
export function encodeProxyHeader(version: ProxyProtocolVersion, addresses: ProxiedAddresses, transport: ProxyTransport): Buffer {
  return version === 1 && transport === 'TCP' ? encodeProxyV1(addresses) : encodeProxyV2(addresses, transport);
}

/** A PROXY header read off the start of a connection. */
export interface DecodedProxyHeader {
  version: ProxyProtocolVersion;
  /** Bytes the header took: the connection's own data follows. */
  length: number;
  /**
   * The client and the address it reached, as the sender saw them. Undefined when the header carries
   * none (v1 `UNKNOWN`, v2 `LOCAL` such as a load balancer's health check, or a family other than
   * IPv4/IPv6): the connection's own addresses stand.
   */
  addresses: ProxiedAddresses | undefined;
}

/** Longest v1 line, CRLF included (the specification's 107 bytes). */
export const PROXY_V1_MAX_LENGTH = 107;
const V1_PREFIX = Buffer.from('PROXY ', 'latin1');
const V2_HEADER_LENGTH = 16;
const PORT = /^(?:0|[1-9][0-9]{0,4})$/;

/**
 * Reads a PROXY protocol v1 or v2 header at the start of `data`, strictly (a malformed header is
 * `'invalid'`, never half-read):
 * - the header;
 * - `'incomplete'`: what arrived so far is the start of a header (or of its signature), more bytes are needed;
 * - `'none'`: the data does not start with a header (already decidable from its first bytes);
 * - `'invalid'`: it starts like one but is not a well-formed header.
 */
export function decodeProxyHeader(data: Buffer): DecodedProxyHeader | 'incomplete' | 'none' | 'invalid' {
  if (data.length === 0) return 'incomplete';
  if (data[0] === PROXY_V2_SIGNATURE[0]) return decodeV2(data);
  if (data[0] === V1_PREFIX[0]) return decodeV1(data);
  return 'none';
}

function startsLike(data: Buffer, signature: Buffer): 'yes' | 'incomplete' | 'no' {
  const n = Math.min(data.length, signature.length);
  if (data.compare(signature, 0, n, 0, n) !== 0) return 'no';
  return n < signature.length ? 'incomplete' : 'yes';
}

function decodeV1(data: Buffer): DecodedProxyHeader | 'incomplete' | 'none' | 'invalid' {
  const start = startsLike(data, V1_PREFIX);
  if (start !== 'yes') return start === 'no' ? 'none' : 'incomplete';
  const lf = data.indexOf(0x0a, 0);
  if (lf === -1 || lf >= PROXY_V1_MAX_LENGTH) return data.length >= PROXY_V1_MAX_LENGTH || lf !== -1 ? 'invalid' : 'incomplete';
  if (data[lf - 1] !== 0x0d) return 'invalid';
  const line = data.toString('latin1', 0, lf - 1);
  const fields = line.split(' ');
  const length = lf + 1;
  // "PROXY UNKNOWN" may be followed by anything (the sender could not tell): the receiver ignores it.
  if (fields[1] === 'UNKNOWN') return { version: 1, length, addresses: undefined };
  if (fields.length !== 6) return 'invalid';
  const [, protocol, source, destination, sourcePort, destinationPort] = fields as [string, string, string, string, string, string];
  const isFamily = protocol === 'TCP4' ? isIPv4 : protocol === 'TCP6' ? isIPv6 : undefined;
  if (isFamily === undefined || !isFamily(source) || !isFamily(destination)) return 'invalid';
  if (source.includes('%') || destination.includes('%')) return 'invalid'; // a zone means nothing to us
  if (!PORT.test(sourcePort) || !PORT.test(destinationPort)) return 'invalid';
  const ports = [Number(sourcePort), Number(destinationPort)] as const;
  if (ports[0] > 65535 || ports[1] > 65535) return 'invalid';
  return {
    version: 1,
    length,
    addresses: {
      sourceAddress: normalizeIp(source),
      sourcePort: ports[0],
      destinationAddress: normalizeIp(destination),
      destinationPort: ports[1],
    },
  };
}

function decodeV2(data: Buffer): DecodedProxyHeader | 'incomplete' | 'none' | 'invalid' {
  const start = startsLike(data, PROXY_V2_SIGNATURE);
  if (start !== 'yes') return start === 'no' ? 'none' : 'incomplete';
  if (data.length < V2_HEADER_LENGTH) return 'incomplete';
  const versionCommand = data[12]!;
  if (versionCommand !== V2_VERSION_PROXY && versionCommand !== V2_VERSION_LOCAL) return 'invalid';
  const familyTransport = data[13]!;
  const addressBytes = data.readUInt16BE(14);
  const length = V2_HEADER_LENGTH + addressBytes;
  if (data.length < length) return 'incomplete';
  // LOCAL: the sender's own connection (a health check); the addresses, if any, are to be ignored.
  if (versionCommand === V2_VERSION_LOCAL) return { version: 2, length, addresses: undefined };
  const family = familyTransport & 0xf0;
  const needed = family === V2_AF_INET ? 12 : family === V2_AF_INET6 ? 36 : 0;
  // AF_UNSPEC and AF_UNIX: nothing we can use, the connection's own addresses stand.
  if (needed === 0) return family === 0x00 || family === 0x30 ? { version: 2, length, addresses: undefined } : 'invalid';
  if (addressBytes < needed) return 'invalid';
  const body = V2_HEADER_LENGTH;
  const ipv4 = family === V2_AF_INET;
  const size = ipv4 ? 4 : 16;
  return {
    version: 2,
    length,
    addresses: {
      sourceAddress: ipv4 ? ipv4Text(data, body) : ipv6Text(data, body),
      destinationAddress: ipv4 ? ipv4Text(data, body + size) : ipv6Text(data, body + size),
      sourcePort: data.readUInt16BE(body + 2 * size),
      destinationPort: data.readUInt16BE(body + 2 * size + 2),
    },
  };
}

function ipv4Text(data: Buffer, offset: number): string {
  return `${data[offset]}.${data[offset + 1]}.${data[offset + 2]}.${data[offset + 3]}`;
}

/** RFC 5952 text; an IPv4-mapped address (a dual-stack sender's IPv4 client) as plain IPv4. */
function ipv6Text(data: Buffer, offset: number): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(data.readUInt16BE(offset + i).toString(16));
  return normalizeIp(groups.join(':'));
}
