import net from 'node:net';

/** One spelling per address (IPv6 compressed, lower case), so that equal addresses compare equal. */
export function canonicalIp(ip: string): string {
  if (net.isIPv6(ip)) return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  return ip;
}

/**
 * The IPv4 address inside an IPv4-mapped IPv6 address (`::ffff:1.2.3.4`, how a dual-stack socket
 * reports an IPv4 peer), else the address itself. It runs per connection and per request, on
 * addresses that come from sockets, so a character check stands in for a full parse.
 */
export function unmapIpv4(ip: string): string {
  return ip.length > 7 && ip.charCodeAt(0) === 58 /* : */ && ip.startsWith('::ffff:') && ip.includes('.', 7) ? ip.slice(7) : ip;
}

/**
 * One spelling per client, for addresses read from headers (PROXY protocol, X-Forwarded-For) rather
 * than from sockets: IPv4 as is, IPv4-mapped IPv6 as IPv4 (in any spelling), other IPv6 canonical.
 * `ip` must be a valid address (net.isIP).
 */
export function normalizeIp(ip: string): string {
  if (net.isIPv4(ip)) return ip;
  const canonical = canonicalIp(ip);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canonical);
  if (mapped === null) return canonical;
  const high = parseInt(mapped[1]!, 16);
  const low = parseInt(mapped[2]!, 16);
  return `${high >>> 8}.${high & 255}.${low >>> 8}.${low & 255}`;
}
