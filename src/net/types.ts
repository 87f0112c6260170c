/**
 * The types the edge's network modules share with each other and with the proxies: the client
 * address settings and what resolving a client yields. Types only.
 */

export type ListenerProxyProtocol = 'off' | 'optional' | 'required';

/** The operator's settings, as the supervisor hands them to its workers (plain data). */
export interface ClientAddressSettings {
  /** CIDRs (or single addresses) of load balancers and CDNs in front of the edge. */
  trustedProxies: readonly string[];
  /** Whether listeners read a PROXY protocol header from trusted peers. */
  listenerProxyProtocol: ListenerProxyProtocol;
}

/** Where a request's client address came from. */
export type ClientAddressSource = 'socket' | 'proxy-protocol' | 'x-forwarded-for';

export interface ResolvedClient {
  ip: string;
  /** 0 when the source names no port (an X-Forwarded-For entry without one). */
  port: number;
  source: ClientAddressSource;
  /**
   * With `source` 'x-forwarded-for': the X-Forwarded-For entries left of the client (what it claimed
   * itself, '' for none), to which the client is appended towards the origin. The trusted hops to
   * its right are the edge's own side and are not passed on.
   */
  forwardedForBefore: string | undefined;
}

/** What reading PROXY headers needs of the client-address policy (`ClientAddressPolicy`). */
export interface ProxyHeaderPolicy {
  readonly proxyProtocol: ListenerProxyProtocol;
  /** Time a trusted peer has to send its PROXY header. */
  readonly headerTimeoutMs: number;
  /** Whether a connection from `peer` starts with (or, `optional`, may start with) a PROXY header. */
  readsProxyHeader(peer: string): boolean;
}
