/**
 * What the upstream exchange does when an attempt to an origin fails: Pingora's `fail_to_connect`
 * and `error_while_proxy` (retry or not) and `fail_to_proxy` (which error page), decided in one
 * place, from the facts of the failure alone (no I/O: upstream/retry-decision.test.ts tables it).
 *
 * - The response head already went to the client: nothing can be taken back; the response is cut,
 *   so the client sees it is incomplete.
 * - The request's own fault: a body that streamed past the size limit (413 page), or a request
 *   undici refused although Node's parser took it (400).
 * - fail_to_connect: the connection could not be opened (refused, unreachable, connect timeout,
 *   TLS handshake or certificate refused, origin policy): no byte of the request reached the
 *   origin, so it goes to the next host whatever its method, and the host is marked down.
 * - error_while_proxy: the connection broke before a response head. An idempotent request (RFC
 *   9110 9.2.2) whose body the proxy can send again (none, or held whole) is retried on the next
 *   host, or once more on the same host when it is the only one (a kept-alive connection the origin
 *   had just closed); not after a timeout (the origin is slow, not gone), a malformed response, or
 *   while the response-side WAF holds the origin's response.
 * - fail_to_proxy: nothing left to try: 504 when the last failure was the origin being too slow,
 *   else 502.
 */
import { BAD_RESPONSE, CONNECT_TIMEOUT, HEADERS_TIMEOUT } from './origin-client.ts';

/** Methods RFC 9110 section 9.2.2 calls idempotent: safe to send twice. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

/** Errors of an origin that answered too slowly: 504 rather than 502. */
const TIMEOUTS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT', 'ETIMEDOUT', HEADERS_TIMEOUT, CONNECT_TIMEOUT]);

/** Errors after which sending the same request again is pointless or unsafe (besides timeouts). */
const NO_RETRY = new Set([BAD_RESPONSE, 'UND_ERR_INFO']);

/** undici refused the request itself (a header or target it considers invalid). */
const INVALID_REQUEST = 'UND_ERR_INVALID_ARG';

/** One failed attempt, as far as the decision needs it. */
export interface AttemptFailure {
  /** The error's code (ECONNREFUSED, UND_ERR_SOCKET, TPS_ORIGIN_HEADERS_TIMEOUT...), else its name. */
  readonly code: string;
  /** It failed opening the connection: no byte of the request reached the origin. */
  readonly beforeRequestSent: boolean;
  /** The origin's response head was sent on to the client. */
  readonly responseForwarded: boolean;
  /** The response-side WAF holds the origin's response head (nothing of it sent yet). */
  readonly responseHeld: boolean;
  /** The request body streamed past the proxy's size limit. */
  readonly bodyTooLarge: boolean;
  readonly method: string;
  /** The request can be sent again: it has no body, or its body is held whole in memory. */
  readonly replayable: boolean;
}

export type FailureDecision =
  /** Destroy the client's response: its head is out, an error page can no longer be sent. */
  | { readonly action: 'cut-response' }
  /** Answer for the request's own fault. */
  | { readonly action: 'refuse'; readonly reason: 'body-too-large' | 'invalid-request' }
  /**
   * Send the request to another host. `markHostDown`: the host could not be connected, skip it for a
   * while. `sameHostIfLast`: when no other host is left, the failed one may take it once more.
   */
  | { readonly action: 'retry'; readonly markHostDown: boolean; readonly sameHostIfLast: boolean }
  /** fail_to_proxy: answer with `failurePage`. */
  | { readonly action: 'fail' };

const CUT_RESPONSE: FailureDecision = Object.freeze({ action: 'cut-response' });
const BODY_TOO_LARGE: FailureDecision = Object.freeze({ action: 'refuse', reason: 'body-too-large' });
const INVALID: FailureDecision = Object.freeze({ action: 'refuse', reason: 'invalid-request' });
const NEXT_HOST_AFTER_CONNECT_FAILURE: FailureDecision = Object.freeze({ action: 'retry', markHostDown: true, sameHostIfLast: false });
const NEXT_HOST_AFTER_BROKEN_EXCHANGE: FailureDecision = Object.freeze({ action: 'retry', markHostDown: false, sameHostIfLast: true });
const FAIL: FailureDecision = Object.freeze({ action: 'fail' });

export function decideAfterFailure(failure: AttemptFailure): FailureDecision {
  if (failure.responseForwarded) return CUT_RESPONSE;
  if (failure.bodyTooLarge) return BODY_TOO_LARGE;
  if (failure.code === INVALID_REQUEST) return INVALID;
  if (failure.beforeRequestSent) return NEXT_HOST_AFTER_CONNECT_FAILURE;
  const sendAgain =
    failure.replayable &&
    IDEMPOTENT.has(failure.method) &&
    !TIMEOUTS.has(failure.code) &&
    !NO_RETRY.has(failure.code) &&
    !failure.responseHeld;
  return sendAgain ? NEXT_HOST_AFTER_BROKEN_EXCHANGE : FAIL;
}

/** fail_to_proxy's page, from the last attempt's error code (undefined: no host could be tried). */
export function failurePage(lastErrorCode: string | undefined): 'gateway-timeout' | 'bad-gateway' {
  return lastErrorCode !== undefined && TIMEOUTS.has(lastErrorCode) ? 'gateway-timeout' : 'bad-gateway';
}
