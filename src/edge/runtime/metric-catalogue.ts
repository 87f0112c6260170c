/**
 * The edge's metric catalogue: every counter and histogram the proxy workers report, with its help
 * text and label names. The workers count by these names (worker.ts), their reports carry them
 * (messages.ts), and the supervisor registers each once in the process's Prometheus registry
 * (supervisor.ts): one list, so a name cannot be counted that is not served, nor served with other
 * labels than it is counted with. The supervisor's own gauges (apply lag, threat feed, certificate
 * expiry) are declared where they are measured.
 */

interface MetricDefinition {
  readonly help: string;
  readonly labelNames: readonly string[];
}

/** Counters the workers add to and report once a second. */
export const EDGE_COUNTERS = {
  tps_edge_connections_total: {
    help: 'Layer 4 connections (TCP) or sessions (UDP) admitted.',
    labelNames: ['proxy', 'protocol'],
  },
  tps_edge_refused_total: {
    help: 'Connections, HTTP/2 sessions, requests or datagrams refused or ended before reaching an origin, by reason (a cap, a deadline, abuse, a malformed or ambiguous request).',
    labelNames: ['proxy', 'protocol', 'reason'],
  },
  tps_edge_app_ddos_requests_total: {
    help: 'Requests the application-layer DDoS protection acted on, by outcome: challenged (challenge page served), solved, failed (a wrong or expired solution), cleared (a valid clearance let through), exempt, blocked (a source that kept ignoring the challenge), shed (over appDdos.originRateLimit).',
    labelNames: ['proxy', 'outcome'],
  },
  tps_edge_app_ddos_attacks_total: {
    help: 'Application-layer attacks on a proxy detected (event="started") and ended (event="ended", its APP_DDOS_ATTACK event recorded) on this node; started minus ended is the attacks under way.',
    labelNames: ['proxy', 'event'],
  },
  tps_edge_rate_limit_store_failures_total: {
    help: 'Rate-limited requests decided by TPS_RATE_LIMIT_STORE_FAILURE_MODE because the shared counters (Redis) did not answer (an error, or no answer within TPS_RATE_LIMIT_STORE_TIMEOUT_MS): mode=local (counted on this node only), closed (refused with 503), open (let through uncounted).',
    labelNames: ['proxy', 'mode'],
  },
  tps_edge_dropped_total: {
    help: 'Datagrams dropped within an admitted session, by reason (REPLY_BUDGET: UDP anti-amplification).',
    labelNames: ['proxy', 'protocol', 'reason'],
  },
  tps_edge_udp_sessions_evicted_total: {
    help: "UDP sessions whose client had not shown it receives, ended to make room for a new session (the oldest first) when the relay's table or the node's budget (TPS_EDGE_MAX_CONNECTIONS) is full.",
    labelNames: ['proxy'],
  },
  tps_edge_bytes_total: {
    help: 'Layer 4 payload bytes, by direction.',
    labelNames: ['proxy', 'protocol', 'direction'],
  },
  tps_edge_origin_failures_total: {
    help: 'Connects to an origin host that failed.',
    labelNames: ['proxy', 'protocol'],
  },
  tps_edge_origin_refused_total: {
    help: 'Connections to an origin the origin policy refused (the address, or every address of the name), by class of address.',
    labelNames: ['proxy', 'reason'],
  },
  tps_edge_http_requests_total: {
    help: 'HTTP requests by who answered (origin, waf, rate-limit, geo, acme, error; none: the client left first) and status class (2xx...; none).',
    labelNames: ['proxy', 'answered_by', 'status_class'],
  },
  tps_edge_waf_rule_matches_total: {
    help: 'WAF rule matches by rule id (requests and responses; a rule counted once per verdict), whether or not the request was blocked.',
    labelNames: ['rule'],
  },
  tps_edge_waf_audit_log_lines_total: {
    help: 'WAF audit-log records (TPS_WAF_AUDIT_LOG) by outcome: written, dropped (the buffer was full or the file failed).',
    labelNames: ['outcome'],
  },
  tps_edge_access_log_lines_total: {
    help: 'Access-log lines by outcome: written, dropped (the buffer was full: the disk could not keep up; or a write failed), sampled (left out, TPS_ACCESS_LOG_SAMPLE).',
    labelNames: ['outcome'],
  },
  tps_insight_sampled_requests_total: {
    help: 'WAF requests counted into a sampled event (their number is in its requestCount) instead of stored as events of their own.',
    labelNames: [],
  },
  tps_insight_overflow_requests_total: {
    help: "WAF requests counted into a proxy-wide sampled event because the sampler's groups (source, rule set) were full: their source and rules are not kept.",
    labelNames: [],
  },
  tps_insight_dropped_requests_total: {
    help: 'WAF requests neither stored nor counted: the sampler had no room at all (a long store outage).',
    labelNames: [],
  },
  tps_edge_waf_uninspected_total: {
    help: "Requests (side=request) or responses (side=response) the WAF could not inspect, by reason (overloaded, cost-share: an expensive client past TPS_WAF_EXPENSIVE_CLIENT_PERCENT of the threads' time, budget: its inspection ran past TPS_WAF_REQUEST_BUDGET_MS, unavailable: thread or transaction gone, error) and by what the proxy's waf.failMode did (outcome=refused: 503; passed: sent on uninspected).",
    labelNames: ['proxy', 'side', 'reason', 'outcome'],
  },
  tps_edge_waf_budget_offender_refused_total: {
    help: "Requests refused early (429, not inspected) because their client's requests kept running past the WAF's inspection budget (TPS_WAF_OFFENDER_*).",
    labelNames: ['proxy'],
  },
  tps_edge_waf_thread_restarts_total: {
    help: 'WAF engine threads replaced, by cause: runaway (a request ran past the watchdog bound, a step the engine could not interrupt; every request the thread held failed) or crash (the thread died). A request past its budget ends alone and is no restart: see tps_edge_waf_uninspected_total{reason="budget"}.',
    labelNames: ['cause'],
  },
  tps_edge_waf_body_over_limit_total: {
    help: 'Request bodies longer than the WAF inspects, by what was done: REJECT (413) or PROCESS_PARTIAL (first part inspected, the rest passed).',
    labelNames: ['proxy', 'action'],
  },
  tps_edge_waf_exchanges_total: {
    help: 'WAF exchanges (a request kept for its response) opened, and ended: inspected (response side), abandoned (request over first), expired (TTL: a leak).',
    labelNames: ['event'],
  },
} as const satisfies Record<string, MetricDefinition>;

export type EdgeCounterName = keyof typeof EDGE_COUNTERS;

/** The histograms the workers observe, in seconds (Prometheus base units). */
export type EdgeHistogramName =
  | 'tps_edge_http_request_duration_seconds'
  | 'tps_edge_origin_response_seconds'
  | 'tps_edge_l4_connection_duration_seconds';

/** Upper bounds of the buckets (seconds); the +Inf bucket is implicit. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const;
const CONNECTION_BUCKETS = [0.01, 0.1, 1, 10, 60, 300, 1800, 3600] as const;

export const EDGE_HISTOGRAMS: Record<EdgeHistogramName, { help: string; labelNames: readonly string[]; buckets: readonly number[] }> = {
  tps_edge_http_request_duration_seconds: {
    help: 'HTTP requests, from the parsed request head to the end of the response (or the client leaving), whoever answered.',
    labelNames: ['proxy'],
    buckets: LATENCY_BUCKETS,
  },
  tps_edge_origin_response_seconds: {
    help: "HTTP requests sent to an origin: from the first connection attempt to the origin's response head (retries on other hosts included).",
    labelNames: ['proxy'],
    buckets: LATENCY_BUCKETS,
  },
  tps_edge_l4_connection_duration_seconds: {
    help: 'Layer 4 connections (TCP) and sessions (UDP) admitted, from accept to close.',
    labelNames: ['proxy', 'protocol'],
    buckets: CONNECTION_BUCKETS,
  },
};
