/**
 * Phase 5, application-layer DDoS protection (src/edge/http/app-ddos/): after the per-source rate
 * limit, before the WAF. Counts the request for the proxy's attack detection; during an attack (or
 * always, in ALWAYS mode) a client without a clearance cookie or an exemption gets the challenge
 * page, and never reaches the WAF or the origin. Also answers the challenge's own path,
 * /.well-known/tps-challenge, where a solved challenge becomes a clearance cookie.
 */
import type { GuardAnswers } from '../app-ddos/guard.ts';
import type { RequestCtx } from '../ctx.ts';
import { requestSummary } from '../insight-events.ts';
import type { PhaseOutcome } from './answer.ts';
import type { RequestPhase } from './phase.ts';
import { pageAnswer } from './respond.ts';

/** The guard's refusal pages are the proxy's own; the attack's event shows the request as the WAF's do. */
const ANSWERS: GuardAnswers<RequestCtx> = {
  page: (ctx, kind, headers) => pageAnswer(ctx, 'app-ddos', kind, { headers }),
  summary: requestSummary,
};

export const challengePhase: RequestPhase = {
  name: 'app-ddos',
  run(ctx: RequestCtx): PhaseOutcome {
    return ctx.proxy.appDdos?.handle(ctx, ANSWERS);
  },
};
