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
