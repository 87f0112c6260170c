/**
 * Phase 4, rate limit: counts the request against the proxy's thresholds for its client address
 * (the socket peer, or what a trusted load balancer says), an IPv6 client by its prefix (a /64 by
 * default: one host picks any address in it, src/net/source-key.ts). Over a threshold, the client is blocked for `blockSeconds`: 429 with
 * Retry-After and the page, whose support id is the episode's (the APP_DDOS_ATTACK event's), so
 * every refused request of one attack points at the same event.
 */
import type { RequestCtx } from '../ctx.ts';
import type { RateDecision } from '../rate-limit/limiter.ts';
import { sourceKey } from '../../../net/source-key.ts';
import { recordEpisodeStart } from '../insight-events.ts';
import { pageAnswer } from './respond.ts';
import type { PhaseOutcome } from './answer.ts';
import type { RequestPhase } from './phase.ts';

export const rateLimitPhase: RequestPhase = {
  name: 'rate-limit',
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome> {
    const limiter = ctx.proxy.rateLimiter;
    if (limiter === undefined) return undefined;
    const key = sourceKey(ctx.clientIp, ctx.proxy.deps.rateLimit?.ipv6Prefix);
    const decision = limiter.check(key);
    // A shared counter store that cannot answer (Redis down) lets the request through, logged:
    // losing the limit for a while is better than losing the site.
    if (decision instanceof Promise) {
      return decision.then(
        (d) => outcome(ctx, d, key),
        (err: unknown) => {
          ctx.proxy.deps.logger?.error({ err, proxyId: ctx.proxy.id }, 'rate-limit counters unavailable; request let through');
          return undefined;
        },
      );
    }
    return outcome(ctx, decision, key);
  },
};

function outcome(ctx: RequestCtx, decision: RateDecision, key: string): PhaseOutcome {
  if (decision.allowed) return undefined;
  ctx.supportId = decision.episode.supportId;
  // Kernel blocking drops the socket peer's packets: only a client that is the peer may be escalated
  // (never a trusted load balancer, which carries everybody's requests).
  const onBlockedRefusal = ctx.proxy.deps.onBlockedRefusal;
  if (onBlockedRefusal !== undefined && ctx.clientAddressSource === 'socket' && ctx.proxy.deps.clientAddress?.trusts(ctx.clientIp) !== true)
    onBlockedRefusal(ctx.proxy.id, key, decision.episode.blockedUntil);
  if (decision.started) recordEpisodeStart(ctx, decision.episode);
  return pageAnswer(ctx, 'rate-limit', 'rate-limit', { headers: ['retry-after', String(decision.retryAfterSeconds)] });
}
