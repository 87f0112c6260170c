/**
 * The request's way through the proxy: the request phases in order (phases/index.ts), then the
 * upstream (upstream/exchange.ts, or upstream/upgrade.ts for a WebSocket handshake), handed the
 * response phases (phases/index.ts) that the exchange runs on the origin's answer. A phase that answers ends the request there. Synchronous
 * phases cost no promise; an asynchronous one resumes the loop where it stopped.
 */
import type { RequestCtx } from './ctx.ts';
import type { PhaseOutcome } from './phases/answer.ts';
import { REQUEST_PHASES, RESPONSE_PHASES } from './phases/index.ts';
import { respond } from './phases/respond.ts';
import { proxyToOrigin } from './upstream/exchange.ts';
import { tunnelToOrigin } from './upstream/upgrade.ts';

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
  else proxyToOrigin(ctx, RESPONSE_PHASES);
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
