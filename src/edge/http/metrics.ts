/**
 * The HTTP proxy's metrics: what it reports, to whatever its dependencies pass (the edge worker
 * counts them by src/edge/runtime/metric-catalogue.ts; tests record them).
 */
import type { AnsweredBy } from '../access-log/types.ts';
import type { RequestRefusal } from './request-target.ts';
import type { WafFailureReason } from './waf/types.ts';

/** Every method optional: a proxy reports only to the ones passed. */
export interface HttpProxyMetrics {
  /**
   * A request ended (answered, proxied or abandoned): how long it took, and how long the origin
   * took to its response head (undefined when no origin was asked).
   */
  requestCompleted?(
    proxyId: string,
    status: number,
    answeredBy: AnsweredBy,
    durationSeconds: number,
    originSeconds: number | undefined,
  ): void;
  /**
   * Requests answered before any per-request object existed (src/edge/http/early-refusal.ts: a
   * blocked source's), `count` since the last call, added up about once a second: counted as
   * `requestCompleted` counts a request, without its duration.
   */
  requestsRefused?(proxyId: string, answeredBy: AnsweredBy, status: number, count: number): void;
  /** One attempt to an origin failed (`reason`: error code such as ECONNREFUSED or UND_ERR_HEADERS_TIMEOUT). */
  upstreamFailed?(proxyId: string, host: string, reason: string): void;
  /**
   * A connection refused by a cap (SOURCE_CONNECTIONS, SOURCE_RATE, GLOBAL_CONNECTIONS), a TLS
   * connection of a source the rate limit blocks (RATE_LIMITED: no handshake for it), a request
   * past its deadline (HEADERS_TIMEOUT, REQUEST_TIMEOUT), or an HTTP/2 session ended (RAPID_RESET).
   */
  connectionRefused?(proxyId: string, protocol: 'HTTP' | 'HTTP/2', reason: string): void;
  /**
   * The WAF gave no verdict on a request or response (`reason`: its engine overloaded, its thread
   * gone, an error); `outcome` is what the proxy's `waf.failMode` did: refused (503) or passed uninspected.
   */
  wafUninspected?(proxyId: string, side: 'request' | 'response', reason: WafFailureReason, outcome: 'refused' | 'passed'): void;
  /** A request refused as malformed or ambiguous (400) before the other phases: its target, Host or HTTP/2 fields. */
  requestRefused?(proxyId: string, protocol: 'HTTP' | 'HTTP/2', reason: RequestRefusal): void;
  /** A request body longer than the WAF inspects: refused (REJECT) or inspected in part (PROCESS_PARTIAL, or LOGGING mode). */
  wafBodyOverLimit?(proxyId: string, action: 'REJECT' | 'PROCESS_PARTIAL'): void;
  /** A request refused uninspected (429) because its client kept running past the WAF's inspection budget. */
  wafBudgetOffenderRefused?(proxyId: string): void;
}
