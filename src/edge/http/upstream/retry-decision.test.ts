/**
 * The retry decision as a table: each row a failed attempt, and what the exchange must do with it.
 * The behaviour over real sockets (fail-over, 502, 504) is in exchange.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decideAfterFailure, failurePage, type AttemptFailure, type FailureDecision } from './retry-decision.ts';

/** A GET without a body whose connection broke before the response head: the common retryable case. */
const BROKEN_GET: AttemptFailure = {
  code: 'UND_ERR_SOCKET',
  beforeRequestSent: false,
  responseForwarded: false,
  responseHeld: false,
  bodyTooLarge: false,
  method: 'GET',
  replayable: true,
};

const CUT: FailureDecision = { action: 'cut-response' };
const NEXT_HOST_MARK_DOWN: FailureDecision = { action: 'retry', markHostDown: true, sameHostIfLast: false };
const NEXT_OR_SAME_HOST: FailureDecision = { action: 'retry', markHostDown: false, sameHostIfLast: true };
const FAIL: FailureDecision = { action: 'fail' };

const rows: [string, Partial<AttemptFailure>, FailureDecision][] = [
  ['a broken GET goes to the next host, or once more to the only one', {}, NEXT_OR_SAME_HOST],
  ['HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent too', { method: 'DELETE' }, NEXT_OR_SAME_HOST],
  ['a broken POST is never sent twice', { method: 'POST' }, FAIL],
  ['nor a PATCH', { method: 'PATCH' }, FAIL],
  ['a PUT whose body streamed cannot be sent again', { method: 'PUT', replayable: false }, FAIL],
  [
    'a refused connection sends even a streamed POST elsewhere, and marks the host down',
    { code: 'ECONNREFUSED', beforeRequestSent: true, method: 'POST', replayable: false },
    NEXT_HOST_MARK_DOWN,
  ],
  [
    'a TLS or origin-policy refusal while connecting likewise',
    { code: 'TPS_ORIGIN_REFUSED', beforeRequestSent: true },
    NEXT_HOST_MARK_DOWN,
  ],
  ['a connect timeout likewise: nothing was sent', { code: 'UND_ERR_CONNECT_TIMEOUT', beforeRequestSent: true }, NEXT_HOST_MARK_DOWN],
  ['an origin too slow to answer is not asked again', { code: 'TPS_ORIGIN_HEADERS_TIMEOUT' }, FAIL],
  ["undici's headers timeout likewise", { code: 'UND_ERR_HEADERS_TIMEOUT' }, FAIL],
  ['a malformed response is not asked for again', { code: 'TPS_ORIGIN_BAD_RESPONSE' }, FAIL],
  ['nor an interim-response error', { code: 'UND_ERR_INFO' }, FAIL],
  ['a failure while the WAF holds the response head fails', { responseHeld: true }, FAIL],
  ['once the head went to the client, the response is cut', { responseForwarded: true }, CUT],
  ['even for a failure that would be retried before', { responseForwarded: true, beforeRequestSent: true }, CUT],
  [
    'a body over the size limit is refused with 413',
    { bodyTooLarge: true, method: 'POST', replayable: false },
    { action: 'refuse', reason: 'body-too-large' },
  ],
  ['a request undici refuses is answered 400', { code: 'UND_ERR_INVALID_ARG' }, { action: 'refuse', reason: 'invalid-request' }],
  [
    'the 400 comes before a retry of a connect failure',
    { code: 'UND_ERR_INVALID_ARG', beforeRequestSent: true },
    { action: 'refuse', reason: 'invalid-request' },
  ],
];

describe('retry decision', () => {
  for (const [name, failure, expected] of rows) {
    it(name, () => {
      assert.deepEqual(decideAfterFailure({ ...BROKEN_GET, ...failure }), expected);
    });
  }

  it('picks 504 after a timeout, 502 after anything else or when no host could be tried', () => {
    const pages: [string | undefined, string][] = [
      ['ETIMEDOUT', 'gateway-timeout'],
      ['UND_ERR_HEADERS_TIMEOUT', 'gateway-timeout'],
      ['UND_ERR_CONNECT_TIMEOUT', 'gateway-timeout'],
      ['TPS_ORIGIN_HEADERS_TIMEOUT', 'gateway-timeout'],
      ['TPS_ORIGIN_CONNECT_TIMEOUT', 'gateway-timeout'],
      ['ECONNREFUSED', 'bad-gateway'],
      ['UND_ERR_SOCKET', 'bad-gateway'],
      ['TPS_ORIGIN_BODY_TIMEOUT', 'bad-gateway'],
      [undefined, 'bad-gateway'],
    ];
    for (const [code, page] of pages) assert.equal(failurePage(code), page, String(code));
  });
});
