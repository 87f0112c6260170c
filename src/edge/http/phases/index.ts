/**
 * The phases of DESIGN.md in order, each its own module (the shapes: phase.ts):
 *
 *   request phases   accept -> request-target -> acme-challenge -> geo-fence -> rate-limit -> challenge (app-ddos) -> waf-request
 *   upstream         upstream/exchange.ts, or upstream/upgrade.ts for a WebSocket handshake
 *                    (a failed attempt: upstream/retry-decision.ts)
 *   response phases  waf-response (run by the exchange on the origin's response)
 *   end              logging (run when the response is over, whoever answered)
 *
 * This file runs the request phases, then hands the request to the upstream. A phase that answers
 * ends the request there. Synchronous phases cost no promise; an asynchronous one resumes the loop
 * where it stopped.
 */
import type { RequestCtx } from '../ctx.ts';
import type { PhaseOutcome } from '../types.ts';
import { proxyToOrigin } from '../upstream/exchange.ts';
import { tunnelToOrigin } from '../upstream/upgrade.ts';
import { acceptPhase } from './accept.ts';
import { acmeChallengePhase } from './acme-challenge.ts';
import { challengePhase } from './challenge.ts';
import { geoFencePhase } from './geo-fence.ts';
import type { RequestPhase } from './phase.ts';
import { rateLimitPhase } from './rate-limit.ts';
import { requestTargetPhase } from './request-target.ts';
import { respond } from './respond.ts';
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

export function runRequestPhases(ctx: RequestCtx, from = 0): void {
  const phases = REQUEST_PHASES;
  for (let i = from; i < phases.length; i++) {
    const phase = phases[i]!;
    let outcome: PhaseOutcome | Promise<PhaseOutcome>;
    try {
      outcome = phase.run(ctx);
    } catch (err) {
      return internalError(ctx, err, phase.name);
    }
    if (outcome === undefined) continue;
    if (outcome instanceof Promise) {
      outcome.then(
        // A client that left while a phase waited is not served (nor its request sent on).
        (answer) => (ctx.finished ? undefined : answer === undefined ? runRequestPhases(ctx, i + 1) : respond(ctx, answer)),
        (err: unknown) => internalError(ctx, err, phase.name),
      );
      return;
    }
    return respond(ctx, outcome);
  }
  if (ctx.upgradeSocket !== undefined) tunnelToOrigin(ctx);
  else proxyToOrigin(ctx);
}

function internalError(ctx: RequestCtx, err: unknown, phase: string): void {
  ctx.proxy.deps.logger?.error({ err, phase, proxyId: ctx.proxy.id, supportId: ctx.supportId }, 'request phase failed');
  respond(ctx, {
    phase: 'internal',
    status: 500,
    headers: ['content-type', 'text/plain; charset=utf-8'],
    body: `internal error, support id ${ctx.supportId}\n`,
    close: true,
  });
}
