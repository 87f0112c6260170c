/**
 * The origin policy at connect time: every connection the service opens on a tenant's behalf (a
 * proxy's origin over TCP, TLS, undici or UDP, a CRL fetch) goes through here.
 *
 * - A literal address is checked before any socket is made (the API checked it when the proxy was
 *   stored, but the operator may have narrowed the policy since).
 * - A name is resolved here (`OriginResolver`), each address is checked, and only the allowed ones
 *   are handed to the socket as its lookup result: the socket connects to an address that was
 *   checked, and no second lookup (a DNS answer that changed in between) can send it elsewhere.
 *   A name none of whose addresses is allowed is refused.
 * - A refusal fails the connection with an `OriginRefusedError` (code TPS_ORIGIN_REFUSED), which the
 *   callers treat as any failed connect (next host, then 502 or a closed connection), and is reported
 *   once to `onRefused` (the edge counts and logs it).
 */
import type dns from 'node:dns';
import net from 'node:net';
import tls from 'node:tls';
import { buildConnector } from 'undici';
import { type OriginPolicy, literalAddress, type OriginRefusalReason, type OriginVerdict } from './origin-policy.ts';
import type { OriginResolver, ResolvedAddress } from './origin-resolver.ts';

export const ORIGIN_REFUSED = 'TPS_ORIGIN_REFUSED';

export class OriginRefusedError extends Error {
  readonly code = ORIGIN_REFUSED;
  readonly reason: OriginRefusalReason;
  constructor(reason: OriginRefusalReason, message: string) {
    super(message);
    this.reason = reason;
  }
}

export function isOriginRefused(error: unknown): error is OriginRefusedError {
  return error instanceof OriginRefusedError;
}

/** One refused connection, as reported to the operator. */
export interface OriginRefusal {
  /** Who asked: the proxy id, or `crl` for a CRL fetch. */
  scope: string;
  /** The host as configured (an address or a name). */
  host: string;
  /** The address that was refused (for a name: the first of its addresses). */
  address: string;
  port: number;
  reason: OriginRefusalReason;
  detail: string;
}

/** Node's `lookup` option of net.connect, tls.connect and dgram.createSocket (dgram passes the family as a number). */
export type OriginLookup = (
  hostname: string,
  options: dns.LookupOptions | number,
  callback: (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void,
) => void;

export class OriginGuard {
  readonly policy: OriginPolicy;
  readonly resolver: OriginResolver;
  readonly #onRefused: (refusal: OriginRefusal) => void;

  constructor(policy: OriginPolicy, resolver: OriginResolver, onRefused: (refusal: OriginRefusal) => void = () => {}) {
    this.policy = policy;
    this.resolver = resolver;
    this.#onRefused = onRefused;
  }

  /** The guard as one proxy (or the CRL fetcher) uses it: refusals are reported with `scope`. */
  for(scope: string): ScopedOriginGuard {
    return new ScopedOriginGuard(this, scope);
  }

  /** @internal Reports and builds the error of one refused connection. */
  refuse(
    scope: string,
    host: string,
    port: number,
    address: string,
    verdict: Exclude<OriginVerdict, { allowed: true }>,
  ): OriginRefusedError {
    this.#onRefused({ scope, host, address, port, reason: verdict.reason, detail: verdict.detail });
    const shown = host === address ? `${address}:${port}` : `${host}:${port} (${address})`;
    return new OriginRefusedError(verdict.reason, `origin ${shown} refused by the origin policy: ${verdict.detail}`);
  }
}

export class ScopedOriginGuard {
  readonly scope: string;
  readonly #guard: OriginGuard;

  constructor(guard: OriginGuard, scope: string) {
    this.#guard = guard;
    this.scope = scope;
  }

  /**
   * The refusal of a literal address (reported), or undefined: allowed, or a name (checked once
   * resolved, by `lookup`).
   */
  checkLiteral(host: string, port: number): OriginRefusedError | undefined {
    const literal = literalAddress(host);
    if (literal === undefined) return undefined;
    const verdict = this.#guard.policy.check(literal, port);
    return verdict.allowed ? undefined : this.#guard.refuse(this.scope, host, port, literal, verdict);
  }

  /** A `lookup` for connections to `host:port`: resolves, keeps the allowed addresses, refuses when none is left. */
  lookup(host: string, port: number): OriginLookup {
    const guard = this.#guard;
    return (hostname, options, callback) => {
      const family = familyOf(options);
      const all = typeof options === 'object' && options.all === true;
      const literal = literalAddress(hostname);
      const resolving: Promise<ResolvedAddress[]> =
        literal !== undefined
          ? Promise.resolve([{ address: literal, family: net.isIP(literal) === 6 ? 6 : 4 }])
          : guard.resolver.resolve(hostname, family);
      resolving.then(
        (found) => {
          const usable = found.filter((candidate) => family === 0 || candidate.family === family);
          let refused: { address: string; verdict: Exclude<OriginVerdict, { allowed: true }> } | undefined;
          const allowed: ResolvedAddress[] = [];
          for (const candidate of usable) {
            const verdict = guard.policy.check(candidate.address, port);
            if (verdict.allowed) allowed.push(candidate);
            else refused ??= { address: candidate.address, verdict };
          }
          if (allowed.length === 0) {
            const error: NodeJS.ErrnoException =
              refused !== undefined
                ? guard.refuse(this.scope, host, port, refused.address, refused.verdict)
                : Object.assign(new Error(`${hostname} has no IPv${family} address`), { code: 'ENOTFOUND' });
            return callback(error, all ? [] : '', 0);
          }
          if (all)
            return callback(
              null,
              allowed.map(({ address, family: f }) => ({ address, family: f })),
            );
          callback(null, allowed[0]!.address, allowed[0]!.family);
        },
        (error: NodeJS.ErrnoException) => callback(error, all ? [] : '', 0),
      );
    };
  }

  /**
   * The `lookup` of a UDP socket towards `host:port`. dgram also resolves the address it binds to
   * (the wildcard, before a connect) through its lookup: that one is the socket's own side and
   * passes as it is; only the origin is judged.
   */
  udpLookup(host: string, port: number): OriginLookup {
    const guarded = this.lookup(host, port);
    return (hostname, options, callback) => {
      if (hostname === host) return guarded(hostname, options, callback);
      const family = net.isIP(hostname);
      if (family !== 0) return callback(null, hostname, family);
      callback(Object.assign(new Error(`unexpected UDP lookup of ${hostname}`), { code: 'EINVAL' }), '', 0);
    };
  }

  /** net.connect to an origin: a refused literal gives a socket that fails at once, without a connect. */
  connect(options: net.TcpNetConnectOpts): net.Socket {
    const host = options.host ?? '';
    const refused = this.checkLiteral(host, options.port);
    if (refused !== undefined) return failedSocket(refused);
    // An IP literal is connected to as it is (checked above); anything else goes through the lookup.
    if (net.isIP(host) !== 0) return net.connect(options);
    return net.connect({ ...options, lookup: this.lookup(host, options.port) as net.TcpNetConnectOpts['lookup'] });
  }

  /** tls.connect to an origin (the certificate is checked against the host as configured). */
  connectTls(options: tls.ConnectionOptions & { host: string; port: number }): net.Socket {
    const refused = this.checkLiteral(options.host, options.port);
    if (refused !== undefined) return failedSocket(refused);
    if (net.isIP(options.host) !== 0) return tls.connect(options);
    return tls.connect({ ...options, lookup: this.lookup(options.host, options.port) as net.TcpNetConnectOpts['lookup'] });
  }

  /** An undici connector (`Pool`'s `connect`) for connections to `host:port`. */
  undiciConnector(host: string, port: number, options: buildConnector.BuildOptions): buildConnector.connector {
    const base = buildConnector({ ...options, lookup: this.lookup(host, port) } as buildConnector.BuildOptions);
    return (connectOptions, callback) => {
      const refused = this.checkLiteral(connectOptions.hostname, port);
      if (refused !== undefined) return callback(refused, null);
      base(connectOptions, callback);
    };
  }
}

function familyOf(options: dns.LookupOptions | number): 0 | 4 | 6 {
  const family = typeof options === 'number' ? options : options.family;
  if (family === 4 || family === 'IPv4') return 4;
  if (family === 6 || family === 'IPv6') return 6;
  return 0;
}

/** A socket that never connects and fails with `error` on the next tick ('error', then 'close'). */
function failedSocket(error: Error): net.Socket {
  const socket = new net.Socket();
  process.nextTick(() => socket.destroy(error));
  return socket;
}
