/**
 * The HTTP access log's entry: what a finished request leaves behind, filled by the logging phase
 * (src/edge/http/phases/logging.ts) and written by access-log.ts (layer 4's: src/edge/l4/types.ts).
 */

/**
 * Who answered a request: the origin, or the proxy itself because of one of its protections (the
 * WAF: a block, a body over the limit, a request it could not inspect; the rate limit; the
 * application-layer DDoS protection (a challenge, a clearance, a source blocked); geo
 * fencing), an ACME challenge, or an `error` (the origin unreachable or too slow, a request refused
 * as malformed or too large or without a valid client certificate, an internal error). `none`: the
 * client left before any response head.
 */
export type AnsweredBy = 'origin' | 'waf' | 'rate-limit' | 'app-ddos' | 'geo' | 'acme' | 'error' | 'none';

/** The WAF's word on a request: absent when the WAF never saw it (answered before, or no WAF). */
export type WafOutcome = 'PASSED' | 'BLOCKED' | 'LOGGED' | 'UNINSPECTED';

/** One line of the access log (the caller writes it, typically as one JSON object per line). */
export interface AccessLogEntry {
  type: 'http';
  /** ISO 8601 UTC, when the request arrived. */
  time: string;
  proxyId: string;
  tenantId: string;
  revision: number;
  supportId: string;
  requestId: string;
  clientIp: string;
  clientPort: number;
  /** Where the client address came from, when not from the socket: then `peerIp` is the load balancer. */
  clientIpSource?: 'proxy-protocol' | 'x-forwarded-for';
  peerIp?: string;
  serverIp: string;
  serverPort: number;
  country: string;
  protocol: 'HTTP/1.0' | 'HTTP/1.1' | 'HTTP/2';
  tls: boolean;
  /** X-Client-Cert-Verified value when the proxy asks for client certificates. */
  clientCertificate?: string;
  method: string;
  host: string;
  /** Request target as the origin was (or would have been) sent it: canonical path and query. */
  url: string;
  /** The target as received, when it differs from `url`. */
  rawUrl?: string;
  /** Status sent to the client; 0 when the client went away before any response head. */
  status: number;
  answeredBy: AnsweredBy;
  /** What the WAF said; absent when it did not see the request. */
  waf?: WafOutcome;
  /** Rule ids of the WAF's event (BLOCKED, LOGGED). */
  wafRules?: number[];
  /** Request body bytes received from the client. */
  bytesIn: number;
  /** Response body bytes sent to the client. */
  bytesOut: number;
  /** `address:port` of the origin that answered (or was tried last). */
  upstream?: string;
  upstreamAttempts: number;
  upstreamError?: string;
  /** From the request head to the end of the response. */
  durationMs: number;
  /** From the first connection attempt to the origin's response head (or its last failure); absent when no origin was asked. */
  originMs?: number;
  /** Set on a line sampled out of many (TPS_ACCESS_LOG_SAMPLE): the requests like it it stands for. */
  sample?: number;
}
