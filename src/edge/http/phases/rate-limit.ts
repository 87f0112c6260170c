/**
 * Phase 4, rate limit: counts the request against the proxy's thresholds for its client address
 * (the socket peer, or what a trusted load balancer says), an IPv6 client by its prefix (a /64 by
 * default: one host picks any address in it, src/edge/net/source-key.ts). Over a threshold, the client is blocked for `blockSeconds`: 429 with
 * Retry-After and the page, whose support id is the episode's (the APP_DDOS_ATTACK event's), so
 * every refused request of one attack points at the same event.
 */
import type { RequestCtx } from '../ctx.ts';
import type { RateDecision } from '../rate-limit/limiter.ts';
import { sourceKey } from '../../net/source-key.ts';
import { recordEpisodeStart } from '../insight-events.ts';
import { pageAnswer } from './respond.ts';
import type { PhaseOutcome } from '../types.ts';
import type { RequestPhase } from './phase.ts';

export const rateLimitPhase: RequestPhase = {
  name: 'rate-limit',
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome> {
    const limiter = ctx.proxy.rateLimiter;
    if (limiter === undefined) return undefined;
    const decision = limiter.check(sourceKey(ctx.clientIp, ctx.proxy.deps.rateLimit?.ipv6Prefix));
    // A shared counter store that cannot answer (Redis down) lets the request through, logged:
    // losing the limit for a while is better than losing the site.
    if (decision instanceof Promise) {
      return decision.then(
        (d) => outcome(ctx, d),
        (err: unknown) => {
          ctx.proxy.deps.logger?.error({ err, proxyId: ctx.proxy.id }, 'rate-limit counters unavailable; request let through');
          return undefined;
        },
      );
    }
    return outcome(ctx, decision);
  },
};

function outcome(ctx: RequestCtx, decision: RateDecision): PhaseOutcome {
  if (decision.allowed) return undefined;
  ctx.supportId = decision.episode.supportId;
  if (decision.started) recordEpisodeStart(ctx, decision.episode);
  return pageAnswer(ctx, 'rate-limit', 'rate-limit', { headers: ['retry-after', String(decision.retryAfterSeconds)] });
}
