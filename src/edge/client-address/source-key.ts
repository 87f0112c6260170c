/**
 * The key a client is counted under by rate limits and connection caps.
 *
 * An IPv4 address is one client. An IPv6 host, though, is usually given a whole /64 (RFC 6177's
 * end-site assignments are /48 to /64, SLAAC needs a /64), and picks any address in it at will:
 * counted per address, one host would get 2^64 fresh counters. So IPv6 addresses are counted per
 * prefix (`TPS_RATE_LIMIT_IPV6_PREFIX`, default 64), as Cloudflare's and nginx's guidance for IPv6
 * rate limiting does. IPv4-mapped IPv6 (`::ffff:192.0.2.1`, how dual-stack sockets report IPv4
 * peers) is its IPv4 address.
 */
import { parseIpInto } from '../l4/ip-set.ts';

export const DEFAULT_IPV6_SOURCE_PREFIX = 64;

const scratch = new Uint32Array(4);

/**
 * `ip` as is for IPv4; for IPv6 its first `ipv6Prefix` bits, written as four hex words and the
 * length (`20010db8:10002:0:0/64`): one spelling per prefix whatever spelling the address came in.
 * Text that is not an address is returned as it is (it is then its own key).
 */
export function sourceKey(ip: string, ipv6Prefix: number = DEFAULT_IPV6_SOURCE_PREFIX): string {
  // Hot path: an IPv4 peer (the common case) has no colon and no allocation.
  if (!ip.includes(':')) return ip;
  if (parseIpInto(ip, scratch) === 0) return ip;
  if (scratch[0] === 0 && scratch[1] === 0 && scratch[2] === 0xffff) return `${scratch[3]! >>> 24}.${(scratch[3]! >>> 16) & 255}.${(scratch[3]! >>> 8) & 255}.${scratch[3]! & 255}`;
  const bits = Math.max(0, Math.min(128, ipv6Prefix));
  let key = '';
  for (let word = 0; word < 4; word++) {
    const keep = bits - 32 * word;
    const value = keep >= 32 ? scratch[word]! : keep <= 0 ? 0 : (scratch[word]! & ~(0xffffffff >>> keep)) >>> 0;
    key += (word === 0 ? '' : ':') + value.toString(16);
  }
  return `${key}/${bits}`;
}
