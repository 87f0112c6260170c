/**
 * The access-log line of one layer 4 connection (TCP) or session (UDP): one when it ends, or when
 * it is refused (TCP). Datagrams of would-be UDP sessions that are refused are counted only
 * (`tps_edge_refused_total`): a datagram flood must not become a flood of lines.
 */
import type { L4RefusalReason } from './l4-proxy.ts';

/**
 * Who ended up with the connection: the origin (it was tunnelled), or the proxy refused it because
 * of the threat feed or a connection cap (`limit`: per-source and per-proxy caps, the UDP session
 * limit), or an `error` (no origin host reachable, a missing or malformed PROXY header).
 */
export type L4AnsweredBy = 'origin' | 'threat-feed' | 'limit' | 'error';

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

export function refusalAnsweredBy(reason: L4RefusalReason): L4AnsweredBy {
  if (reason === 'THREAT_FEED') return 'threat-feed';
  if (reason === 'PROXY_HEADER') return 'error';
  return 'limit';
}

/** Milliseconds with microsecond precision, as the HTTP lines have them. */
export function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
