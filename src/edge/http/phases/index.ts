/**
 * The phases of DESIGN.md in order, each its own module (the shapes: phase.ts):
 *
 *   request phases   accept -> request-target -> acme-challenge -> geo-fence -> rate-limit -> challenge (app-ddos) -> waf-request
 *   upstream         upstream/exchange.ts, or upstream/upgrade.ts for a WebSocket handshake
 *                    (a failed attempt: upstream/retry-decision.ts)
 *   response phases  waf-response (run by the exchange on the origin's response)
 *   end              logging (run when the response is over, whoever answered)
 *
 * This file lists the request and response phases; ../pipeline.ts runs the request phases and
 * hands the request to the upstream with the response phases, which the exchange runs on the
 * origin's response. So the phases never import the upstream, and the upstream knows the response
 * phases by their shape only (phase.ts). response-decoding.ts is no phase: the WAF's response side
 * decodes a copy of the body with it, for its rules; the client gets the origin's bytes.
 */
import { acceptPhase } from './accept.ts';
import { acmeChallengePhase } from './acme-challenge.ts';
import { challengePhase } from './challenge.ts';
import { geoFencePhase } from './geo-fence.ts';
import type { RequestPhase, ResponsePhase } from './phase.ts';
import { rateLimitPhase } from './rate-limit.ts';
import { requestTargetPhase } from './request-target.ts';
import { wafRequestPhase } from './waf-request.ts';
import { wafResponsePhase } from './waf-response.ts';

export const REQUEST_PHASES: readonly RequestPhase[] = [
  acceptPhase,
  requestTargetPhase,
  acmeChallengePhase,
  geoFencePhase,
  rateLimitPhase,
  challengePhase,
  wafRequestPhase,
];

/** In order: each sees the origin's response after the ones before it let it go on. */
export const RESPONSE_PHASES: readonly ResponsePhase[] = [wafResponsePhase];
