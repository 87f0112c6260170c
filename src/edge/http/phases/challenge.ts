/**
 * Phase 5, application-layer DDoS protection (src/edge/http/app-ddos/): after the per-source rate
 * limit, before the WAF. Counts the request for the proxy's attack detection; during an attack (or
 * always, in ALWAYS mode) a client without a clearance cookie or an exemption gets the challenge
 * page, and never reaches the WAF or the origin. Also answers the challenge's own path,
 * /.well-known/tps-challenge, where a solved challenge becomes a clearance cookie.
 */
import type { GuardAnswers } from '../app-ddos/types.ts';
import type { RequestCtx } from '../ctx.ts';
import { requestSummary } from '../insight-events.ts';
import type { Answer, PhaseOutcome } from '../types.ts';
import type { RequestPhase } from './phase.ts';
import { pageAnswer } from './respond.ts';

const answers: GuardAnswers<RequestCtx, Answer> = {
  page: (ctx, kind, retryAfterSeconds) => pageAnswer(ctx, 'app-ddos', kind, { headers: ['retry-after', String(retryAfterSeconds)] }),
  summary: requestSummary,
};

export const challengePhase: RequestPhase = {
  name: 'app-ddos',
  run(ctx: RequestCtx): PhaseOutcome {
    return ctx.proxy.appDdos?.handle(ctx, answers);
  },
};
