/**
 * The shape every request phase shares. Phases run in the order of DESIGN.md:
 *
 *   accept -> acme-challenge -> geo-fence -> rate-limit -> waf -> upstream (-> waf response) -> events
 *
 * A request phase looks at the per-request `RequestCtx` and either lets the request go on
 * (returns undefined) or answers the client itself (returns an `Answer`, and no later phase runs).
 * Phases return synchronously when they can: the runner only pays for a promise when a phase
 * really waits (a WAF verdict, a shared rate-limit store, an ACME lookup).
 */
import type { RequestCtx } from '../ctx.ts';
import type { PhaseName, PhaseOutcome } from '../types.ts';

export interface RequestPhase {
  readonly name: PhaseName;
  /** Runs once per request, after the phases before it let the request through. */
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome>;
}
