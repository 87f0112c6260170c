import net from 'node:net';

/** One spelling per address (IPv6 compressed, lower case), so that equal addresses compare equal. */
export function canonicalIp(ip: string): string {
  if (net.isIPv6(ip)) return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  return ip;
}

/** The IPv4 address inside an IPv4-mapped IPv6 address (::ffff:1.2.3.4), else the address itself. */
export function unmapIpv4(ip: string): string {
  return ip.startsWith('::ffff:') && net.isIPv4(ip.slice(7)) ? ip.slice(7) : ip;
}
