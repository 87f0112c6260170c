/**
 * The key a client is counted under by rate limits and connection caps (the edge's, and the API's
 * limit on calls without a token).
 *
 * An IPv4 address is one client. An IPv6 host, though, is usually given a whole /64 (RFC 6177's
 * end-site assignments are /48 to /64, SLAAC needs a /64) and picks any address in it at will:
 * counted per address, one host would get 2^64 fresh counters. So IPv6 addresses are counted per
 * prefix (`TPS_RATE_LIMIT_IPV6_PREFIX`, default 64), as Cloudflare's and nginx's guidance for IPv6
 * rate limiting does. IPv4-mapped IPv6 (`::ffff:192.0.2.1`, how dual-stack sockets report IPv4
 * peers) is its IPv4 address.
 */

export const DEFAULT_IPV6_SOURCE_PREFIX = 64;

const groups = new Uint16Array(8);

/**
 * `ip` as is for IPv4; for IPv6 its first `ipv6Prefix` bits as eight hex groups and the length
 * (`2001:db8:1:2:0:0:0:0/64`): one spelling per prefix whatever spelling the address came in.
 * Text that is not an address is returned as it is (it is then its own key).
 */
export function sourceKey(ip: string, ipv6Prefix: number = DEFAULT_IPV6_SOURCE_PREFIX): string {
  // Hot path: an IPv4 peer (the common case) has no colon and costs nothing.
  if (!ip.includes(':')) return ip;
  if (!parseIpv6Groups(ip, groups)) return ip;
  if (groups[0] === 0 && groups[1] === 0 && groups[2] === 0 && groups[3] === 0 && groups[4] === 0 && groups[5] === 0xffff) {
    return `${groups[6]! >>> 8}.${groups[6]! & 255}.${groups[7]! >>> 8}.${groups[7]! & 255}`;
  }
  const bits = Math.max(0, Math.min(128, Math.trunc(ipv6Prefix)));
  let key = '';
  for (let i = 0; i < 8; i++) {
    const keep = bits - 16 * i;
    const value = keep >= 16 ? groups[i]! : keep <= 0 ? 0 : groups[i]! & (0xffff << (16 - keep)) & 0xffff;
    key += (i === 0 ? '' : ':') + value.toString(16);
  }
  return `${key}/${bits}`;
}

/**
 * Parses an IPv6 address (with `::`, an embedded IPv4 tail, a `%zone` ignored) into eight groups.
 * False when it is not one.
 */
export function parseIpv6Groups(text: string, out: Uint16Array): boolean {
  const zone = text.indexOf('%');
  const address = zone === -1 ? text : text.slice(0, zone);
  const gap = address.indexOf('::');
  if (gap !== -1 && address.indexOf('::', gap + 1) !== -1) return false;
  const left = wordsOf(gap === -1 ? address : address.slice(0, gap), gap === -1);
  const right = gap === -1 ? [] : wordsOf(address.slice(gap + 2), true);
  if (left === undefined || right === undefined) return false;
  if (gap === -1) {
    if (left.length !== 8) return false;
    out.set(left);
    return true;
  }
  if (left.length + right.length > 7) return false;
  out.fill(0);
  out.set(left, 0);
  out.set(right, 8 - right.length);
  return true;
}

/** The 16-bit words of colon-separated groups; an IPv4 tail (two words) only where `v4Tail`. */
function wordsOf(text: string, v4Tail: boolean): number[] | undefined {
  if (text === '') return [];
  const parts = text.split(':');
  const words: number[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (v4Tail && i === parts.length - 1 && part.includes('.')) {
      const v4 = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/.exec(part);
      if (v4 === null) return undefined;
      const octets = v4.slice(1).map(Number);
      if (octets.some((octet) => octet > 255)) return undefined;
      words.push((octets[0]! << 8) | octets[1]!, (octets[2]! << 8) | octets[3]!);
      continue;
    }
    if (!/^[0-9A-Fa-f]{1,4}$/.test(part)) return undefined;
    words.push(parseInt(part, 16));
  }
  return words;
}
