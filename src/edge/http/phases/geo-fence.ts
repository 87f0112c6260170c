/**
 * Phase 3, geo fence: `geoFencing` BLOCK_LISTED refuses the listed countries, ALLOW_LISTED refuses
 * every other one, including an address whose country is unknown ("ZZ"). A refused client gets 403
 * and the block page. The country is looked up only when a fence is configured.
 */
import type { RequestCtx } from '../ctx.ts';
import { pageAnswer } from './respond.ts';
import type { PhaseOutcome } from './answer.ts';
import type { RequestPhase } from './phase.ts';

export const geoFencePhase: RequestPhase = {
  name: 'geo-fence',
  run(ctx: RequestCtx): PhaseOutcome {
    const fence = ctx.proxy.geoFence;
    if (fence === undefined) return undefined;
    const listed = fence.countries.has(ctx.country);
    if (listed === fence.allowListed) return undefined;
    return pageAnswer(ctx, 'geo-fence', 'geo-fence');
  },
};
