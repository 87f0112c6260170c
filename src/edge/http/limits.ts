/**
 * Operator limits of the HTTP proxy: sizes and timeouts that keep a slow or greedy client (slowloris,
 * slow POST, endless upload) from holding the proxy. They are node-wide settings, not per-proxy
 * configuration: the customer's traffic configuration cannot loosen them.
 */

export interface HttpLimits {
  /**
   * Largest request head in bytes (HTTP/1: request line and headers; HTTP/2: the header list).
   * Larger: 431 and the connection is closed. Default 16 KiB, nginx's and Node's default.
   */
  maxHeaderSize: number;
  /** Largest request body in bytes, declared (Content-Length) or streamed (chunked, HTTP/2). Larger: 413. Default 100 MiB. */
  maxBodySize: number;
  /**
   * Time allowed from the first byte of a request to the end of its head (HTTP/1). Past it the client
   * gets 408 and is dropped: this is what stops slowloris. Default 10 s.
   */
  headersTimeoutMs: number;
  /** Time allowed to receive a whole request, body included (HTTP/1): stops a slow POST. Default 300 s. */
  requestTimeoutMs: number;
  /** Idle time allowed between two requests on a kept-alive HTTP/1 connection. Default 5 s. */
  keepAliveTimeoutMs: number;
  /** A connection (HTTP/1 socket or HTTP/2 session) that moves no byte for this long is closed. Default 60 s. */
  idleTimeoutMs: number;
  /**
   * How often Node sweeps connections for the headers and request timeouts; a slow client is dropped
   * between `headersTimeoutMs` and `headersTimeoutMs + connectionsCheckingIntervalMs`. Default 1 s.
   */
  connectionsCheckingIntervalMs: number;
  /** Time allowed for a client's TLS handshake. Default 10 s. */
  tlsHandshakeTimeoutMs: number;
  /** Time allowed to open a connection (TCP and TLS) to an origin; past it the host is marked down. Default 5 s. */
  upstreamConnectTimeoutMs: number;
  /** Time allowed for an origin to send its response head. Past it: 504. Default 60 s. */
  upstreamHeadersTimeoutMs: number;
  /** Longest silence allowed between two chunks of an origin's response body. Default 300 s. */
  upstreamBodyTimeoutMs: number;
  /** Most connections the proxy keeps open to one origin host; further requests queue. Default 256. */
  upstreamConnectionsPerHost: number;
  /**
   * Idle time after which the proxy closes a kept-alive origin connection. Kept below the common
   * origin default (5 s) so the origin does not close a connection the proxy is about to reuse. Default 4 s.
   */
  upstreamKeepAliveTimeoutMs: number;
  /** Idle time after which a proxied WebSocket connection is closed. Default 600 s. */
  upgradeIdleTimeoutMs: number;
  /** On stop or rebind: how long open requests may finish before their connections are cut. Default 5 s. */
  stopGraceMs: number;
}

export const DEFAULT_HTTP_LIMITS: Readonly<HttpLimits> = Object.freeze({
  maxHeaderSize: 16 * 1024,
  maxBodySize: 100 * 1024 * 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 300_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 60_000,
  connectionsCheckingIntervalMs: 1_000,
  tlsHandshakeTimeoutMs: 10_000,
  upstreamConnectTimeoutMs: 5_000,
  upstreamHeadersTimeoutMs: 60_000,
  upstreamBodyTimeoutMs: 300_000,
  upstreamConnectionsPerHost: 256,
  upstreamKeepAliveTimeoutMs: 4_000,
  upgradeIdleTimeoutMs: 600_000,
  stopGraceMs: 5_000,
});

export function resolveLimits(overrides: Partial<HttpLimits> | undefined): HttpLimits {
  const limits = { ...DEFAULT_HTTP_LIMITS, ...overrides };
  // Node refuses a headers timeout longer than the request timeout; the request timeout bounds both.
  if (limits.requestTimeoutMs > 0 && limits.headersTimeoutMs > limits.requestTimeoutMs) {
    limits.headersTimeoutMs = limits.requestTimeoutMs;
  }
  return limits;
}
