/**
 * Phase 4, rate limit: counts the request against the proxy's thresholds for its client address
 * (the socket peer, or what a trusted load balancer says), an IPv6 client by its prefix (a /64 by
 * default: one host picks any address in it, src/net/source-key.ts). Over a threshold, the client is blocked for `blockSeconds`: 429 with
 * Retry-After and the page, whose support id is the episode's (the APP_DDOS_ATTACK event's), so
 * every refused request of one attack points at the same event. When the shared counters (Redis)
 * do not answer, the node's failure mode decides (TPS_RATE_LIMIT_STORE_FAILURE_MODE): counted on
 * this node, refused with 503, or let through; each such request counted and logged.
 */
import type { RequestCtx } from '../ctx.ts';
import type { RateDecision } from '../rate-limit/limiter.ts';
import { sourceKey } from '../../../net/source-key.ts';
import { recordEpisodeStart } from '../insight-events.ts';
import { pageAnswer } from './respond.ts';
import type { PhaseOutcome } from './answer.ts';
import type { RequestPhase } from './phase.ts';
import { RateLimitStoreUnavailableError } from '../../limits/store-failover.ts';

/** Retry-After of a 503 for a limit that could not be checked (as the WAF's failMode CLOSED says). */
const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

export const rateLimitPhase: RequestPhase = {
  name: 'rate-limit',
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome> {
    const limiter = ctx.proxy.rateLimiter;
    if (limiter === undefined) return undefined;
    const key = sourceKey(ctx.clientIp, ctx.proxy.deps.rateLimit?.ipv6Prefix);
    const decision = limiter.check(key);
    if (decision instanceof Promise)
      return decision.then(
        (d) => outcome(ctx, d, key),
        (error: unknown) => unavailable(ctx, error),
      );
    return outcome(ctx, decision, key);
  },
};

/**
 * The limiter gave no decision: the shared store did not answer and the node's failure mode is
 * `closed` (src/edge/limits/store-failover.ts, which counted and logged it), or a fault. Either way
 * the request is refused, as the WAF's failMode CLOSED refuses what it cannot inspect: a limit that
 * cannot be checked is never a pass unless the operator chose `open`.
 */
function unavailable(ctx: RequestCtx, error: unknown): PhaseOutcome {
  if (!(error instanceof RateLimitStoreUnavailableError))
    ctx.proxy.deps.logger?.error({ err: error, proxyId: ctx.proxy.id }, 'rate limit could not decide: request refused with 503');
  return pageAnswer(ctx, 'rate-limit', 'rate-limit-unavailable', { headers: ['retry-after', String(UNAVAILABLE_RETRY_AFTER_SECONDS)] });
}

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
