/**
 * PROXY protocol headers the proxy sends to the origin so that it learns the client's real address
 * and port (https://www.haproxy.org/download/2.6/doc/proxy-protocol.txt).
 *
 * - Version 1: one text line, `PROXY TCP4 <src> <dst> <srcport> <dstport>\r\n`. TCP only.
 * - Version 2: a 16-byte binary preamble plus the addresses. TCP (STREAM) and UDP (DGRAM); for UDP
 *   the header is prepended to every datagram, as HAProxy and nginx do.
 *
 * A connection whose two ends are IPv4-mapped IPv6 addresses (a dual-stack listener) is described as
 * IPv4, which is what it is on the wire.
 */
import { isIPv4, isIPv6 } from 'node:net';
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
