/**
 * One configuration revision of a proxy, compiled into what the request path reads: an immutable
 * snapshot swapped atomically by `HttpProxy.update`. A request keeps the snapshot it started with.
 *
 * Stateful parts are carried over when their configuration did not change, so an update does not
 * reset them: the origin pools (warm keep-alive connections, host health) and the rate limiter
 * (counters, blocks, episodes).
 */
import type { HttpLimits } from './limits.ts';
import { canonicalPathPrefix, DEFAULT_REQUEST_TARGET_SETTINGS, type RequestTargetSettings } from './request-target.ts';
import { RateLimiter, type RateEpisode } from './rate-limit/limiter.ts';
import { AppDdosGuard } from './app-ddos/guard.ts';
import type { HttpProxyDeps, ResolvedHttpProxy } from './types.ts';
import type { WafSettings } from './waf/types.ts';
import { OriginSet, originSetKey } from './upstream/origins.ts';
import { BudgetOffenders } from './waf/budget-offenders.ts';

export interface GeoFence {
  /** ALLOW_LISTED: only `countries` pass. BLOCK_LISTED: `countries` are refused. */
  readonly allowListed: boolean;
  readonly countries: ReadonlySet<string>;
}

export class ProxySnapshot {
  readonly config: ResolvedHttpProxy;
  readonly id: string;
  readonly tenantId: string;
  readonly revision: number;
  readonly deps: HttpProxyDeps;
  readonly limits: HttpLimits;
  readonly location: string;
  readonly secure: boolean;
  readonly clientVerification: 'VERIFY_AND_REJECT' | 'VERIFY_AND_FORWARD' | undefined;
  readonly geoFence: GeoFence | undefined;
  readonly rateLimiter: RateLimiter | undefined;
  readonly rateLimitKey: string;
  /** `appDdos` attributes other than OFF: detection and the challenge. */
  readonly appDdos: AppDdosGuard | undefined;
  readonly origins: OriginSet;
  /** How request targets are read (`requestTarget`, defaults applied): see request-target.ts. */
  readonly requestTarget: RequestTargetSettings;
  /** The proxy's `waf` attributes, exclusions' `pathPrefix` in the canonical form request paths have. */
  readonly waf: WafSettings;
  /**
   * Request bodies and the WAF, resolved from `waf.requestBodyLimit` / `waf.bodyLimitAction` or the
   * hook's defaults (the operator's): bytes inspected, bytes of a multipart/form-data upload
   * inspected (never less than `limit`), and whether a longer body is refused. Never above the
   * proxy's hard `maxBodySize`.
   */
  readonly wafBody: { readonly limit: number; readonly multipartLimit: number; readonly reject: boolean };
  /** Clients this proxy refuses early for running past the WAF's budget again and again (kept across revisions). */
  readonly wafOffenders: BudgetOffenders;

  /**
   * `previous`: the revision this one replaces (its origin pools and rate limiter are kept when their
   * settings did not change). `onEpisodeUpdate`: where a new rate limiter sends its episodes' counters.
   */
  constructor(
    config: ResolvedHttpProxy,
    deps: HttpProxyDeps,
    limits: HttpLimits,
    previous: ProxySnapshot | undefined,
    onEpisodeUpdate: (episode: RateEpisode) => void,
  ) {
    const attributes = config.attributes;
    this.config = config;
    this.id = config.id;
    this.tenantId = config.tenantId;
    this.revision = config.revision;
    this.deps = deps;
    this.limits = limits;
    this.location = deps.location;
    this.secure = config.frontendCertificate !== undefined;
    this.clientVerification = this.secure ? config.clientVerification?.mode : undefined;
    const geo = attributes.geoFencing;
    this.geoFence = geo
      ? { allowListed: geo.mode === 'ALLOW_LISTED', countries: new Set(geo.countries.map((c) => c.toUpperCase())) }
      : undefined;

    const rateLimiting = attributes.rateLimiting;
    this.rateLimitKey = rateLimiting ? JSON.stringify(rateLimiting) : '';
    if (!rateLimiting) {
      this.rateLimiter = undefined;
    } else if (previous?.rateLimiter !== undefined && previous.rateLimitKey === this.rateLimitKey) {
      this.rateLimiter = previous.rateLimiter;
    } else {
      const options = deps.rateLimit ?? {};
      this.rateLimiter = new RateLimiter(rateLimiting, {
        // A store made by the edge is shared by its workers: episodes are then named from the shared block.
        ...(options.createStore ? { store: options.createStore(rateLimiting, config.id), sharedEpisodeScope: config.id } : {}),
        ...(options.maxEntries !== undefined ? { maxEntries: options.maxEntries } : {}),
        ...(options.episodeGapMs !== undefined ? { episodeGapMs: options.episodeGapMs } : {}),
        ...(options.updateIntervalMs !== undefined ? { updateIntervalMs: options.updateIntervalMs } : {}),
        onEpisodeUpdate,
      });
    }

    const appDdos = attributes.appDdos;
    if (!appDdos || appDdos.mode === 'OFF') this.appDdos = undefined;
    else if (previous?.appDdos !== undefined && previous.appDdos.key === JSON.stringify(appDdos)) this.appDdos = previous.appDdos;
    else {
      const frontendIp = attributes.frontend.ipv4 ?? attributes.frontend.ipv6 ?? '0.0.0.0';
      this.appDdos = new AppDdosGuard({ id: config.id, tenantId: config.tenantId, frontendIp }, appDdos, deps);
    }

    this.origins =
      previous !== undefined && previous.origins.key === originSetKey(config)
        ? previous.origins
        : new OriginSet(config, limits, deps.originGuard, previous?.origins, deps.hostDownForMs);

    this.requestTarget = { ...DEFAULT_REQUEST_TARGET_SETTINGS, ...attributes.requestTarget };
    const configured = attributes.waf ?? {
      mode: 'BLOCKING',
      paranoiaLevel: 1,
      failMode: 'CLOSED',
      logMatchedData: false,
      ruleExclusions: [],
    };
    // the operator's input limits under the proxy's own: each request carries its proxy's whole set
    const waf =
      deps.wafInputLimits === undefined
        ? configured
        : { ...configured, inputLimits: { ...deps.wafInputLimits, ...configured.inputLimits } };
    const mergeSlashes = this.requestTarget.mergeSlashes;
    this.waf = waf.ruleExclusions.some((exclusion) => exclusion.pathPrefix !== undefined)
      ? {
          ...waf,
          ruleExclusions: waf.ruleExclusions.map((exclusion) =>
            exclusion.pathPrefix === undefined
              ? exclusion
              : { ...exclusion, pathPrefix: canonicalPathPrefix(exclusion.pathPrefix, mergeSlashes) || '/' },
          ),
        }
      : waf;
    const hook = deps.waf;
    const limit = Math.min(this.waf.requestBodyLimit ?? hook?.requestBodyLimit ?? 0, limits.maxBodySize);
    this.wafBody = {
      limit,
      multipartLimit: Math.min(Math.max(limit, hook?.multipartBodyLimit ?? 0), limits.maxBodySize),
      reject: (this.waf.bodyLimitAction ?? hook?.bodyLimitAction ?? 'REJECT') === 'REJECT',
    };
    this.wafOffenders = previous?.wafOffenders ?? new BudgetOffenders(deps.wafBudgetOffenders);
  }

  /** Releases what this snapshot owns and `next` does not reuse (`next` undefined: the proxy stops). */
  async retire(next: ProxySnapshot | undefined, graceMs: number): Promise<void> {
    if (this.rateLimiter !== undefined && this.rateLimiter !== next?.rateLimiter) this.rateLimiter.dispose();
    if (this.appDdos !== undefined && this.appDdos !== next?.appDdos) this.appDdos.dispose();
    if (this.origins !== next?.origins) await this.origins.close(graceMs);
  }
}
