/**
 * Who the client is when the edge sits behind load balancers or CDNs (DESIGN.md, "Client address").
 *
 * By default the client is the socket's peer, and no header can change that. An operator may list
 * the networks of their load balancers (TPS_TRUSTED_PROXIES); only for a peer in those networks:
 * - a PROXY protocol header (TPS_LISTENER_PROXY_PROTOCOL, read by `proxy-header.ts` before anything
 *   else on the connection, TLS included) replaces the peer by the address it names;
 * - X-Forwarded-For is walked right to left from that address, skipping addresses that are trusted
 *   themselves: the first untrusted one is the client (all trusted: the leftmost). An entry that is
 *   not an address stops the walk at the last trusted hop, which is then the client.
 * A peer outside the list gets neither: its PROXY header is just data and its X-Forwarded-For is never
 * read, so nobody can spoof an address into rate limits, geo fencing, the WAF or the events.
 *
 * One policy per worker serves every proxy (it is node-wide, like the listeners' addresses).
 */
import { isIP } from 'node:net';
import { normalizeIp } from './ip.ts';
import { IpSet, parsePrefixInto } from './ip-set.ts';
import type { ProxiedAddresses } from './proxy-protocol.ts';
import { proxiedAddressesOf } from './proxy-header.ts';
import type { ClientAddressSettings, ClientAddressSource, ListenerProxyProtocol, ProxyHeaderPolicy, ResolvedClient } from './types.ts';

/** How long a trusted peer has to send its PROXY header (first byte to last). */
export const DEFAULT_PROXY_HEADER_TIMEOUT_MS = 5_000;

/** The entries of `cidrs` that are not an IPv4/IPv6 address or CIDR (for the settings' error message). */
export function invalidCidrs(cidrs: readonly string[]): string[] {
  const scratch = new Uint32Array(4);
  return cidrs.filter((cidr) => parsePrefixInto(cidr.trim(), scratch) === undefined);
}

export class ClientAddressPolicy implements ProxyHeaderPolicy {
  readonly proxyProtocol: ListenerProxyProtocol;
  /** Time a trusted peer has to send its PROXY header. */
  readonly headerTimeoutMs: number;
  private readonly trusted = new IpSet(16);

  /** Throws on an entry that is not an address or CIDR (settings are validated before this). */
  constructor(settings: ClientAddressSettings, options: { headerTimeoutMs?: number } = {}) {
    for (const cidr of settings.trustedProxies) {
      if (!this.trusted.add(cidr)) throw new Error(`not an IP address or CIDR: "${cidr}"`);
    }
    this.proxyProtocol = settings.listenerProxyProtocol;
    this.headerTimeoutMs = options.headerTimeoutMs ?? DEFAULT_PROXY_HEADER_TIMEOUT_MS;
  }

  /** No policy when no network is trusted: the socket peer is then always the client. */
  static from(settings: ClientAddressSettings | undefined, options: { headerTimeoutMs?: number } = {}): ClientAddressPolicy | undefined {
    if (settings === undefined || settings.trustedProxies.length === 0) return undefined;
    return new ClientAddressPolicy(settings, options);
  }

  /** Whether `ip` (IPv4, IPv6 or IPv4-mapped) is in a trusted network. */
  trusts(ip: string): boolean {
    return this.trusted.has(ip);
  }

  /** Whether a connection from `peer` starts with (or, `optional`, may start with) a PROXY header. */
  readsProxyHeader(peer: string): boolean {
    return this.proxyProtocol !== 'off' && this.trusted.has(peer);
  }

  /**
   * The client of an HTTP request that arrived on `socket` from `peerIp:peerPort` (the socket's peer,
   * IPv4 unmapped) with `forwardedFor` (its X-Forwarded-For values joined with ", ", or undefined).
   * Undefined when the peer is the client (the common case, no allocation).
   */
  resolveRequest(peerIp: string, peerPort: number, socket: object, forwardedFor: string | undefined): ResolvedClient | undefined {
    let hop = peerIp;
    let hopPort = peerPort;
    let source: ClientAddressSource = 'socket';
    if (this.proxyProtocol !== 'off') {
      const proxied: ProxiedAddresses | undefined = proxiedAddressesOf(socket);
      if (proxied !== undefined) {
        hop = proxied.sourceAddress;
        hopPort = proxied.sourcePort;
        source = 'proxy-protocol';
      }
    }
    if (forwardedFor !== undefined && forwardedFor !== '' && this.trusted.has(hop)) {
      const walked = this.walkForwardedFor(forwardedFor);
      if (walked !== undefined) return walked;
    }
    return source === 'socket' ? undefined : { ip: hop, port: hopPort, source, forwardedForBefore: undefined };
  }

  /**
   * X-Forwarded-For right to left (the connection's address, trusted, is to its right): the first
   * untrusted entry, else the leftmost; undefined when not even its last entry is an address.
   */
  walkForwardedFor(forwardedFor: string): ResolvedClient | undefined {
    let found: ResolvedClient | undefined;
    let end = forwardedFor.length;
    for (;;) {
      const comma = forwardedFor.lastIndexOf(',', end - 1);
      const entry = parseForwardedEntry(forwardedFor, comma + 1, end);
      if (entry === undefined) break;
      found = {
        ip: entry.ip,
        port: entry.port,
        source: 'x-forwarded-for',
        forwardedForBefore: comma < 0 ? '' : forwardedFor.slice(0, comma).trim(),
      };
      if (comma < 0 || !this.trusted.has(entry.ip)) break;
      end = comma;
    }
    return found;
  }
}

/**
 * One X-Forwarded-For entry, `text[start, end)`: an address, optionally with a port (`192.0.2.1:4711`,
 * `[2001:db8::1]:4711`, as some load balancers write it). IPv4-mapped IPv6 becomes IPv4, IPv6 its
 * canonical text, so that one client is one key for the rate limiter.
 */
export function parseForwardedEntry(text: string, start = 0, end = text.length): { ip: string; port: number } | undefined {
  let entry = text.slice(start, end).trim();
  let port = 0;
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']');
    if (close === -1) return undefined;
    const after = entry.slice(close + 1);
    if (after !== '') {
      if (!/^:[0-9]{1,5}$/.test(after)) return undefined;
      port = Number(after.slice(1));
    }
    entry = entry.slice(1, close);
  } else {
    const colon = entry.indexOf(':');
    if (colon !== -1 && colon === entry.lastIndexOf(':')) {
      // One colon: IPv4 with a port (IPv6 has at least two).
      if (!/^[0-9]{1,5}$/.test(entry.slice(colon + 1))) return undefined;
      port = Number(entry.slice(colon + 1));
      entry = entry.slice(0, colon);
    }
  }
  if (port > 65535 || entry.includes('%') || isIP(entry) === 0) return undefined;
  return { ip: normalizeIp(entry), port };
}
