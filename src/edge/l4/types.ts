/**
 * The types the layer 4 proxy's modules share, and what it reports to the edge runtime (metrics,
 * access-log lines). Types only.
 */
import type { BackendHost } from '../balance/index.ts';
import type { FloodRefusal } from '../limits/flood-limits.ts';
import type { TcpTunnelResult } from './tcp.ts';
import type { UdpSessionResult } from './udp.ts';

export type L4Protocol = 'TCP' | 'UDP';

/** Why a connection (TCP) or a datagram of a would-be session (UDP) was refused. */
export type L4RefusalReason =
  | 'THREAT_FEED'
  | FloodRefusal
  /** UDP only: the relay holds its maximum number of sessions, every one confirmed (none to evict). */
  | 'SESSION_LIMIT'
  /** TCP from a trusted load balancer: no PROXY header (`required`), a malformed one, or none in time. */
  | 'PROXY_HEADER'
  /** TCP: the node's edge holds TPS_EDGE_MAX_CONNECTIONS connections already. */
  | 'NODE_BUDGET';

export interface L4ConnectionClosed {
  /** How it ended (TCP: `NO_HOST` when no origin host could be reached). */
  reason: TcpTunnelResult['reason'] | UdpSessionResult['reason'];
  /** Payload bytes from the client to the origin (without PROXY headers). */
  bytesFromClient: number;
  bytesToClient: number;
  /** From accept (TCP) or the first datagram (UDP) to the end. */
  durationSeconds: number;
}

/**
 * Counters a proxy reports. The edge maps them to its metrics system; each call names the proxy
 * (traffic configuration id) so that one implementation serves every proxy.
 */
export interface L4Metrics {
  /** A connection (TCP) or session (UDP) passed admission. */
  connectionAccepted(proxyId: string, protocol: L4Protocol): void;
  /** Refused before any byte reached an origin. For UDP, counted per dropped datagram. */
  connectionRefused(proxyId: string, protocol: L4Protocol, reason: L4RefusalReason): void;
  /** An accepted connection or session ended; its bytes are counted here, once. */
  connectionClosed(proxyId: string, protocol: L4Protocol, closed: L4ConnectionClosed): void;
  /** A connect to an origin host failed (or the origin policy refused it): the host is marked down for a while, the next one is tried. */
  originConnectFailed(proxyId: string, protocol: L4Protocol, host: BackendHost, error: Error): void;
  /** UDP: a reply dropped within an admitted session (REPLY_BUDGET: over the anti-amplification budget). */
  datagramDropped?(proxyId: string, protocol: L4Protocol, reason: 'REPLY_BUDGET'): void;
  /** UDP: an unconfirmed session was ended to make room for a new one (udp.ts). */
  udpSessionEvicted?(proxyId: string): void;
}

/** Something to report operational trouble to (pino's signature fits). */
export interface L4Logger {
  warn(details: object, message: string): void;
}

/**
 * Who ended up with the connection: the origin (it was tunnelled), or the proxy refused it because
 * of the threat feed or a connection cap (`limit`: per-source and per-proxy caps, the UDP session
 * limit), or an `error` (no origin host reachable, a missing or malformed PROXY header).
 */
export type L4AnsweredBy = 'origin' | 'threat-feed' | 'limit' | 'error';

/**
 * The access-log line of one layer 4 connection (TCP) or session (UDP): one when it ends, or when
 * it is refused (TCP). Datagrams of would-be UDP sessions that are refused are counted only
 * (`tps_edge_refused_total`): a datagram flood must not become a flood of lines.
 */
export interface L4AccessLogEntry {
  type: 'l4';
  /** ISO 8601 UTC, when the connection (or session) was accepted. */
  time: string;
  proxyId: string;
  tenantId: string;
  protocol: 'TCP' | 'UDP';
  clientIp: string;
  clientPort: number;
  /** Set when a trusted load balancer's PROXY header named the client: then `peerIp` is the load balancer. */
  clientIpSource?: 'proxy-protocol';
  peerIp?: string;
  serverIp: string;
  serverPort: number;
  answeredBy: L4AnsweredBy;
  /** Why it was refused (THREAT_FEED, SOURCE_CONNECTIONS, ...), for a refused connection. */
  refused?: L4RefusalReason;
  /** How it ended (COMPLETED, IDLE_TIMEOUT, NO_HOST, ...), for an admitted one. */
  end?: string;
  /** `address:port` of the origin host. */
  upstream?: string;
  /** Payload bytes from the client, and to it. */
  bytesIn: number;
  bytesOut: number;
  durationMs: number;
  /** TCP: from accept to the origin connection (hosts tried before included). */
  originMs?: number;
  /** Set on a line sampled out of many (TPS_ACCESS_LOG_SAMPLE): the connections like it it stands for. */
  sample?: number;
}
