/**
 * The phases of DESIGN.md in order, each its own module (the shapes: phase.ts):
 *
 *   request phases   accept -> request-target -> acme-challenge -> geo-fence -> rate-limit -> challenge (app-ddos) -> waf-request
 *   upstream         upstream/exchange.ts, or upstream/upgrade.ts for a WebSocket handshake
 *                    (a failed attempt: upstream/retry-decision.ts)
 *   response phases  waf-response (run by the exchange on the origin's response)
 *   end              logging (run when the response is over, whoever answered)
 *
 * This file lists the request phases; ../pipeline.ts runs them and hands the request to the
 * upstream, so that the phases never import the upstream (the upstream runs the response phase).
 */
import { acceptPhase } from './accept.ts';
import { acmeChallengePhase } from './acme-challenge.ts';
import { challengePhase } from './challenge.ts';
import { geoFencePhase } from './geo-fence.ts';
import type { RequestPhase } from './phase.ts';
import { rateLimitPhase } from './rate-limit.ts';
import { requestTargetPhase } from './request-target.ts';
import { wafRequestPhase } from './waf-request.ts';

export const REQUEST_PHASES: readonly RequestPhase[] = [
  acceptPhase,
  requestTargetPhase,
  acmeChallengePhase,
  geoFencePhase,
  rateLimitPhase,
  challengePhase,
  wafRequestPhase,
];
