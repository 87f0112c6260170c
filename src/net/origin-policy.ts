/**
 * Where the service may connect on a tenant's behalf (DESIGN.md, "Hostile input"): the origins of
 * proxies and the CRL distribution points of CA certificates. A tenant names the address; without
 * this policy it could name the control plane's own listener, the cloud metadata service, or the
 * store's database, and the edge would connect there for it.
 *
 * The policy is pure (an address and a port in, a verdict out) and is asked in three places: the
 * API for literal addresses (422 ORIGIN_NOT_ALLOWED), the edge at every connect (names once resolved,
 * literals again because the operator may have narrowed the policy since the proxy was stored), and
 * the CRL fetcher at every connect, redirects included.
 *
 * The verdict, in this order:
 * 1. The service's own listeners are refused always, whatever the operator allowed: `ownHosts` at
 *    any port (front-end IPs, the hosts of the database and of Redis), `ownListeners` at their port
 *    (the API and metrics listeners).
 * 2. An address inside `allowedNetworks` (TPS_ORIGIN_ALLOWED_NETWORKS) is allowed.
 * 3. Special-purpose addresses are refused: loopback, link-local, private (RFC 1918, IPv6 ULA and
 *    the deprecated site-local), CGNAT, multicast, unspecified (0.0.0.0/8, ::), broadcast and
 *    reserved (240.0.0.0/4). IPv6 forms that carry an IPv4 address (IPv4-mapped ::ffff:0:0/96,
 *    IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by that IPv4 address;
 *    the IPv4-compatible form, deprecated, is refused even with a public one inside.
 * 4. Anything else (a public address) is allowed.
 */
import net from 'node:net';
import { IpSet, parseIpInto } from './ip-set.ts';

export type OriginRefusalReason =
  | 'own-listener'
  | 'loopback'
  | 'link-local'
  | 'private'
  | 'cgnat'
  | 'multicast'
  | 'unspecified'
  | 'broadcast'
  | 'reserved'
  | 'not-an-address';

/** The operator's side of the policy, as plain data (it crosses to the edge's worker threads). */
export interface OriginPolicySettings {
  /** CIDRs opened for origins although they are special-purpose (TPS_ORIGIN_ALLOWED_NETWORKS). */
  allowedNetworks: readonly string[];
  /** Addresses refused at any port: the front-end IPs, the database and Redis hosts (resolved). */
  ownHosts: readonly string[];
  /** Addresses refused at one port: the API and metrics listeners. */
  ownListeners: readonly { address: string; port: number }[];
}

export type OriginVerdict = { allowed: true } | { allowed: false; reason: OriginRefusalReason; detail: string };

const ALLOWED: OriginVerdict = { allowed: true };

/**
 * What the operator's log and metrics call each class. Never shown to a tenant: the API words every
 * refusal alike (src/api/origin-checks.ts), or the class would tell the service's own hosts apart.
 */
const DESCRIPTIONS: Record<OriginRefusalReason, string> = {
  'own-listener': "an address of the service's own",
  loopback: 'a loopback address',
  'link-local': 'a link-local address (cloud metadata services live there)',
  private: 'a private address',
  cgnat: 'a shared address space (CGNAT) address',
  multicast: 'a multicast address',
  unspecified: 'an unspecified address',
  broadcast: 'the broadcast address',
  reserved: 'a reserved address',
  'not-an-address': 'not an IP address',
};

/** IPv4 special-purpose networks, most specific first (broadcast lies inside reserved). */
const IPV4_CLASSES: readonly (readonly [network: number, bits: number, reason: OriginRefusalReason])[] = [
  [ipv4(0, 0, 0, 0), 8, 'unspecified'],
  [ipv4(127, 0, 0, 0), 8, 'loopback'],
  [ipv4(255, 255, 255, 255), 32, 'broadcast'],
  [ipv4(224, 0, 0, 0), 4, 'multicast'],
  [ipv4(240, 0, 0, 0), 4, 'reserved'],
  [ipv4(169, 254, 0, 0), 16, 'link-local'],
  [ipv4(10, 0, 0, 0), 8, 'private'],
  [ipv4(172, 16, 0, 0), 12, 'private'],
  [ipv4(192, 168, 0, 0), 16, 'private'],
  [ipv4(100, 64, 0, 0), 10, 'cgnat'],
];

function ipv4(a: number, b: number, c: number, d: number): number {
  return ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
}

/** The class of an IPv4 address (an unsigned 32-bit number), or undefined for a public one. */
function ipv4Class(address: number): OriginRefusalReason | undefined {
  for (const [network, bits, reason] of IPV4_CLASSES) {
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    if ((address & mask) >>> 0 === network) return reason;
  }
  return undefined;
}

/**
 * The IPv4 address an IPv6 address stands for, when it carries one: IPv4-mapped, IPv4-compatible,
 * NAT64 (well-known prefix) or 6to4. `key` is the address as four 32-bit words.
 */
function embeddedIpv4(key: Uint32Array): number | undefined {
  const [w0, w1, w2, w3] = [key[0]!, key[1]!, key[2]!, key[3]!];
  if (w0 === 0 && w1 === 0 && w2 === 0xffff) return w3;
  if (w0 === 0 && w1 === 0 && w2 === 0) return w3;
  if (w0 === 0x0064ff9b && w1 === 0 && w2 === 0) return w3;
  if (w0 >>> 16 === 0x2002) return (((w0 & 0xffff) << 16) | (w1 >>> 16)) >>> 0;
  return undefined;
}

/** The class of an address parsed into four words (IPv4 as IPv4-mapped), or undefined for a public one. */
function addressClass(key: Uint32Array): OriginRefusalReason | undefined {
  const [w0, w1, w2, w3] = [key[0]!, key[1]!, key[2]!, key[3]!];
  if (w0 === 0 && w1 === 0 && w2 === 0) {
    // ::/96: the unspecified and loopback addresses, then the deprecated IPv4-compatible form.
    if (w3 === 0) return 'unspecified';
    if (w3 === 1) return 'loopback';
    return ipv4Class(w3) ?? 'reserved';
  }
  const embedded = embeddedIpv4(key);
  if (embedded !== undefined) return ipv4Class(embedded);
  const top = w0 >>> 16;
  if (top >>> 8 === 0xff) return 'multicast'; // ff00::/8
  if ((top & 0xffc0) === 0xfe80) return 'link-local'; // fe80::/10
  if ((top & 0xfe00) === 0xfc00) return 'private'; // fc00::/7, unique local
  if ((top & 0xffc0) === 0xfec0) return 'private'; // fec0::/10, site-local (deprecated)
  if (w0 === 0x0064ff9b && w1 >>> 16 === 1) return 'private'; // 64:ff9b:1::/48, local-use NAT64
  return undefined;
}

/**
 * An address a text stands for, or undefined when it is a DNS name: an IPv4 or IPv6 literal (a zone
 * is dropped), or one of the legacy IPv4 spellings resolvers still accept and turn into an address
 * (`127.1`, `0x7f.0.0.1`, `2130706433`, `0177.0.0.1`), which are names to a schema but loopback to
 * getaddrinfo.
 */
export function literalAddress(text: string): string | undefined {
  const host = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  const zone = host.indexOf('%');
  const bare = zone === -1 ? host : host.slice(0, zone);
  if (net.isIP(bare) !== 0) return bare;
  const legacy = legacyIpv4(bare);
  return legacy === undefined ? undefined : `${legacy >>> 24}.${(legacy >>> 16) & 255}.${(legacy >>> 8) & 255}.${legacy & 255}`;
}

/** inet_aton's forms: one to four parts, each decimal, octal (leading 0) or hex (0x); the last fills the rest. */
function legacyIpv4(text: string): number | undefined {
  const parts = text.endsWith('.') ? text.slice(0, -1).split('.') : text.split('.');
  if (parts.length === 0 || parts.length > 4) return undefined;
  const values: number[] = [];
  for (const part of parts) {
    let value: number;
    if (/^0[xX][0-9a-fA-F]*$/.test(part)) value = part.length === 2 ? 0 : parseInt(part.slice(2), 16);
    else if (/^0[0-7]*$/.test(part)) value = part.length === 1 ? 0 : parseInt(part.slice(1), 8);
    else if (/^[1-9][0-9]*$/.test(part)) value = Number(part);
    else return undefined;
    if (!Number.isFinite(value)) return undefined;
    values.push(value);
  }
  const last = values.pop()!;
  if (values.some((value) => value > 255)) return undefined;
  if (last >= 2 ** (8 * (4 - values.length))) return undefined;
  let address = 0;
  for (const [index, value] of values.entries()) address += value * 2 ** (8 * (3 - index));
  return address + last;
}

export class OriginPolicy {
  readonly settings: OriginPolicySettings;
  private readonly allowed = new IpSet(16);
  private readonly ownHosts = new IpSet(16);
  /** The addresses of the listeners refused at their port, by port. */
  private readonly ownListeners = new Map<number, IpSet>();
  private readonly key = new Uint32Array(4);
  /** The IPv4-mapped form of an address that carries an IPv4 one (`isOwn`). */
  private readonly mapped = new Uint32Array(4);

  /** Throws on an entry that is not an address or CIDR (settings are validated before this). */
  constructor(settings: OriginPolicySettings) {
    this.settings = settings;
    for (const cidr of settings.allowedNetworks) {
      if (!this.allowed.add(cidr)) throw new Error(`not an IP address or CIDR: "${cidr}"`);
    }
    for (const host of settings.ownHosts) {
      if (!this.ownHosts.add(host)) throw new Error(`not an IP address: "${host}"`);
    }
    for (const { address, port } of settings.ownListeners) {
      if (parseIpInto(address, this.key) === 0) throw new Error(`not an IP address: "${address}"`);
      let addresses = this.ownListeners.get(port);
      if (addresses === undefined) this.ownListeners.set(port, (addresses = new IpSet(4)));
      addresses.insert(this.key, 128);
    }
  }

  /**
   * Whether the service may connect to `address` (an IP literal; anything else is refused) at
   * `port` on a tenant's behalf.
   */
  check(address: string, port: number): OriginVerdict {
    const key = this.key;
    if (parseIpInto(address, key) === 0) return refusal('not-an-address', address);
    if (this.isOwn(key, port)) return refusal('own-listener', address);
    if (this.allowed.hasKey(key)) return ALLOWED;
    const reason = addressClass(key);
    return reason === undefined ? ALLOWED : refusal(reason, address);
  }

  /**
   * Own listeners are matched in every spelling that reaches them, IPv4 inside IPv6 included. Asked
   * at every connect an edge makes (each proxied TCP connection): no allocation on the way.
   */
  private isOwn(key: Uint32Array, port: number): boolean {
    if (this.isOwnKey(key, port)) return true;
    // An IPv4 address is parsed into its mapped form: that one was just asked.
    if (key[0] === 0 && key[1] === 0 && key[2] === 0xffff) return false;
    const embedded = embeddedIpv4(key);
    if (embedded === undefined) return false;
    const mapped = this.mapped;
    mapped[0] = 0;
    mapped[1] = 0;
    mapped[2] = 0xffff;
    mapped[3] = embedded;
    return this.isOwnKey(mapped, port);
  }

  private isOwnKey(key: Uint32Array, port: number): boolean {
    return this.ownHosts.hasKey(key) || this.ownListeners.get(port)?.hasKey(key) === true;
  }
}

function refusal(reason: OriginRefusalReason, address: string): OriginVerdict {
  return { allowed: false, reason, detail: `${address} is ${DESCRIPTIONS[reason]}` };
}

/** What a class of addresses is called in the operator's messages (`a link-local address`, ...). */
export function describeRefusal(reason: OriginRefusalReason): string {
  return DESCRIPTIONS[reason];
}
