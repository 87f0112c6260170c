/**
 * A small CIDR -> value table with longest-prefix match, for operator overrides (a few dozen lines,
 * not a routing table: lookups scan the entries, longest prefix first).
 */
import net from 'node:net';

interface Entry<T> {
  family: 4 | 6;
  prefix: number;
  /** Network address: IPv4 in the low 32 bits, IPv6 as 128 bits. */
  network: bigint;
  value: T;
}

export class CidrTable<T> {
  private readonly entries: Entry<T>[] = [];

  /** Adds `cidr` ("10.0.0.0/8", "2001:db8::/32", or a bare address = a single host). Throws on a malformed one. */
  add(cidr: string, value: T): void {
    const slash = cidr.indexOf('/');
    const address = slash === -1 ? cidr : cidr.slice(0, slash);
    const family = net.isIPv4(address) ? 4 : net.isIPv6(address) ? 6 : 0;
    if (family === 0) throw new Error(`not an IP address: "${address}"`);
    const bits = family === 4 ? 32 : 128;
    const prefix = slash === -1 ? bits : Number(cidr.slice(slash + 1));
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > bits || (slash !== -1 && !/^\d+$/.test(cidr.slice(slash + 1)))) {
      throw new Error(`bad prefix length in "${cidr}"`);
    }
    const network = ipToBigInt(address, family) & mask(prefix, bits);
    this.entries.push({ family, prefix, network, value });
    // Longest prefix first: the first match is the most specific one.
    this.entries.sort((a, b) => b.prefix - a.prefix);
  }

  get size(): number {
    return this.entries.length;
  }

  /** The value of the most specific entry containing `ip`, or undefined (also for a malformed `ip`). */
  lookup(ip: string): T | undefined {
    if (this.entries.length === 0) return undefined;
    let address = ip;
    if (address.startsWith('::ffff:') && net.isIPv4(address.slice(7))) address = address.slice(7);
    const family = net.isIPv4(address) ? 4 : net.isIPv6(address) ? 6 : 0;
    if (family === 0) return undefined;
    const value = ipToBigInt(address, family);
    const bits = family === 4 ? 32 : 128;
    for (const entry of this.entries) {
      if (entry.family === family && (value & mask(entry.prefix, bits)) === entry.network) return entry.value;
    }
    return undefined;
  }
}

function mask(prefix: number, bits: number): bigint {
  if (prefix === 0) return 0n;
  const all = (1n << BigInt(bits)) - 1n;
  return (all >> BigInt(bits - prefix)) << BigInt(bits - prefix);
}

function ipToBigInt(address: string, family: 4 | 6): bigint {
  if (family === 4) return ipv4ToBigInt(address);
  // The URL parser canonicalises IPv6 (an embedded IPv4 becomes two hex groups), leaving only "::" to expand.
  const canonical = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  const [head = '', rest] = canonical.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = rest === undefined || rest === '' ? [] : rest.split(':');
  const middle = rest === undefined ? [] : new Array<string>(8 - left.length - right.length).fill('0');
  let result = 0n;
  for (const group of [...left, ...middle, ...right]) result = (result << 16n) | BigInt(parseInt(group, 16));
  return result;
}

function ipv4ToBigInt(address: string): bigint {
  let result = 0n;
  for (const octet of address.split('.')) result = (result << 8n) | BigInt(Number(octet));
  return result;
}
