/**
 * One proxy's application-layer DDoS protection (its `appDdos` attributes): counts every request
 * for the detector, and during an attack (or always, in ALWAYS mode) lets through only clients
 * with a valid clearance cookie or an exemption; the others get the challenge page, and a source
 * that keeps asking without solving is blocked. A snapshot of the proxy holds one; an update whose
 * `appDdos` did not change keeps it. The counts live in shared memory (detector.ts), so a new guard
 * carries on where the old one was.
 */
import { createHash } from 'node:crypto';
import type { AppDdosSettings, DistributedAttackEvent, RequestSummary } from '@tps/model';
import { sourceKey } from '../../../net/source-key.ts';
import type { IncomingHttpHeaders } from 'node:http';
import type { RateLimitStore } from '../../limits/rate-store.ts';
import type { Answer, PhaseOutcome } from '../phases/answer.ts';
import type { HttpProxyDeps } from '../types.ts';
import { CHALLENGE_CSP, CHALLENGE_PATH, CHALLENGE_STATUS, renderChallengePage } from './challenge-page.ts';
import { CLEARANCE_COOKIE, ClearanceKeys, clearanceNetwork, cookieValue } from './clearance.ts';
import { type AttackReport, AttackDetector, createAppDdosTables } from './detector.ts';
import { Exemptions } from './exemptions.ts';
import { type AppDdosDeps, type AppDdosOperatorSettings, type AppDdosTablesInit, DEFAULT_APP_DDOS_SETTINGS } from './types.ts';

/** Outside an attack (ALWAYS mode), a source's unsolved challenges count per window of this length. */
const ALWAYS_WINDOW_MS = 600_000;
/** Bits added to the difficulty at most as an attack grows past its trigger (one per doubling). */
const MAX_EXTRA_BITS = 2;
const MAX_RETURN_PATH = 2048;

// Per thread: the keys (one secret per edge), the tables of a thread without shared ones, and the
// first request of an episode this thread owns (kept across snapshots, until its event is recorded).
const keysByDeps = new WeakMap<object, ClearanceKeys>();
const localTables = new Map<string, AppDdosTablesInit>();
const episodeStarts = new Map<string, { source: DistributedAttackEvent['source']; destinationIp: string; request: RequestSummary }>();
const MAX_EPISODE_STARTS = 256;

/**
 * What the guard reads of a request, and writes (the support id of an attack's pages): the proxy's
 * RequestCtx has it. Its own type, so that the snapshot that holds a guard does not import the
 * request context that holds the snapshot.
 */
export interface GuardedRequest {
  readonly target: string;
  readonly req: { readonly method?: string | undefined; readonly url?: string | undefined; readonly headers: IncomingHttpHeaders };
  readonly clientIp: string;
  readonly clientPort: number;
  readonly country: string;
  readonly serverIp: string;
  readonly secure: boolean;
  supportId: string;
  readonly proxy: { readonly rateLimiter?: { readonly store: Pick<RateLimitStore, 'block'> } | undefined };
}

/** What the guard asks of the proxy for a request: its refusal pages, and its summary for the attack's event. */
export interface GuardAnswers<R extends GuardedRequest> {
  page(request: R, kind: 'rate-limit' | 'origin-busy', headers: readonly string[]): Answer;
  summary(request: R, statusCode: number): RequestSummary;
}

export class AppDdosGuard {
  /** The settings it was built from: an update with the same keeps it. */
  readonly key: string;
  readonly #proxy: { id: string; tenantId: string; location: string; frontendIp: string };
  readonly #settings: AppDdosSettings;
  readonly #operator: AppDdosOperatorSettings;
  readonly #deps: HttpProxyDeps;
  readonly #appDeps: AppDdosDeps | undefined;
  readonly #detector: AttackDetector;
  readonly #keys: ClearanceKeys;
  readonly #exemptions: Exemptions;
  readonly #timer: NodeJS.Timeout;
  /** The episode whose start this thread last looked at. */
  #seenEpisode = 0;
  readonly #cluster: AppDdosDeps['cluster'];
  #clusterErrorAt = 0;
  /** The support id of the episode under way (derived once per episode). */
  #supportIdOf = { start: 0, id: '' };

  constructor(proxy: { id: string; tenantId: string; frontendIp: string }, settings: AppDdosSettings, deps: HttpProxyDeps) {
    this.key = JSON.stringify(settings);
    this.#proxy = { ...proxy, location: deps.location };
    this.#settings = settings;
    this.#deps = deps;
    this.#appDeps = deps.appDdos;
    this.#operator = { ...DEFAULT_APP_DDOS_SETTINGS, ...deps.appDdos?.settings };
    this.#cluster = deps.appDdos?.cluster;
    const keysOwner: object = deps.appDdos ?? deps;
    let keys = keysByDeps.get(keysOwner);
    if (keys === undefined) {
      keys = new ClearanceKeys(deps.appDdos?.secret, this.#operator.clearanceSeconds);
      keysByDeps.set(keysOwner, keys);
    }
    this.#keys = keys;
    let tables = deps.appDdos?.tables?.(proxy.id);
    if (tables === undefined) {
      tables = localTables.get(proxy.id) ?? createAppDdosTables();
      localTables.set(proxy.id, tables);
    }
    const op = this.#operator;
    this.#detector = new AttackDetector(tables, {
      threshold: settings.threshold,
      factor: settings.factor ?? op.factor,
      minRate: op.minRate,
      baselineHalfLifeSeconds: op.baselineHalfLifeSeconds,
      quietSeconds: op.quietSeconds,
    });
    this.#exemptions = new Exemptions(settings.exemptions);
    this.#timer = setInterval(() => this.#tick(), 1000);
    this.#timer.unref();
  }

  dispose(): void {
    clearInterval(this.#timer);
  }

  handle<R extends GuardedRequest>(ctx: R, answers: GuardAnswers<R>): PhaseOutcome {
    const now = Date.now();
    const state = this.#detector.count(now);
    if (this.#cluster !== undefined) this.#exchange();
    const attackStart = state.attackStart;
    // The canonical target (the request-target phase's): exemptions match what the origin is sent.
    const url = ctx.target || (ctx.req.url ?? '/');
    if (isChallengePath(url)) return this.#verify(ctx, answers, url, now, attackStart);
    if (attackStart === 0 && this.#settings.mode !== 'ALWAYS') return undefined;
    if (attackStart > 0) this.#noteStart(ctx, answers, attackStart);
    const episode = attackStart > 0 ? attackStart : -(Math.floor(now / ALWAYS_WINDOW_MS) + 1);
    const key = sourceKey(ctx.clientIp, this.#deps.rateLimit?.ipv6Prefix);
    const network = clearanceNetwork(ctx.clientIp);
    const cleared = this.#cleared(ctx, network, now);
    const exempt = !cleared && this.#exemptions.matches(ctx.clientIp, url, header(ctx, 'user-agent'));
    const op = this.#operator;
    const countsUnsolved = !cleared && !exempt && !browserSubresource(ctx);
    const source = this.#detector.source(key, episode, now, countsUnsolved, op.maxUnsolved, op.blockSeconds * 1000);
    // Our pages during an attack show the attack's support id (its event's); a request let through keeps its own.
    const episodeSupportId = attackStart > 0 ? this.#episodeSupportId(attackStart) : undefined;
    if (source.verdict === 'blocked' || source.verdict === 'just-blocked') {
      if (source.verdict === 'just-blocked') this.#block(ctx, key, source.blockedUntil);
      this.#detector.add(now, 'blocked', source.isNew);
      this.#count('blocked');
      if (episodeSupportId !== undefined) ctx.supportId = episodeSupportId;
      const retryAfter = Math.max(1, Math.ceil((source.blockedUntil - now) / 1000));
      return answers.page(ctx, 'rate-limit', ['retry-after', String(retryAfter)]);
    }
    if (cleared || exempt) {
      if (this.#detector.pass(now, this.#settings.originRateLimit, source.isNew) === 'shed') {
        this.#count('shed');
        if (episodeSupportId !== undefined) ctx.supportId = episodeSupportId;
        return answers.page(ctx, 'origin-busy', ['retry-after', '1']);
      }
      this.#count(cleared ? 'cleared' : 'exempt');
      return undefined;
    }
    this.#detector.add(now, 'challenged', source.isNew);
    this.#count('challenged');
    if (episodeSupportId !== undefined) ctx.supportId = episodeSupportId;
    return this.#challenge(ctx, network, state.lastRate, state.trigger, attackStart > 0, now);
  }

  #episodeSupportId(attackStart: number): string {
    if (this.#supportIdOf.start !== attackStart) {
      this.#supportIdOf = { start: attackStart, id: episodeIds(this.#proxy.id, attackStart, this.#appDeps?.nodeId).supportId };
    }
    return this.#supportIdOf.id;
  }

  #cleared(ctx: GuardedRequest, network: string, now: number): boolean {
    const value = cookieValue(header(ctx, 'cookie'), CLEARANCE_COOKIE);
    return value !== undefined && this.#keys.verifyClearance(this.#proxy.id, network, value, Math.floor(now / 1000));
  }

  #challenge(ctx: GuardedRequest, network: string, lastRate: number, trigger: number, attack: boolean, now: number): Answer {
    const extra = attack && trigger > 0 ? Math.min(MAX_EXTRA_BITS, Math.max(0, Math.floor(Math.log2(lastRate / trigger)))) : 0;
    const bits = this.#operator.challengeBits + extra;
    const challenge = this.#keys.challenge(this.#proxy.id, network, bits, Math.floor(now / 1000));
    const method = ctx.req.method;
    const returnPath = method === 'GET' || method === 'HEAD' ? safeReturnPath(ctx.req.url ?? '/') : '/';
    return {
      phase: 'app-ddos',
      status: CHALLENGE_STATUS,
      headers: [
        'content-type',
        'text/html; charset=utf-8',
        'cache-control',
        'no-store',
        'x-content-type-options',
        'nosniff',
        'content-security-policy',
        CHALLENGE_CSP,
        'tps-mitigated',
        'challenge',
      ],
      body: renderChallengePage({ challenge, bits, returnPath, supportId: ctx.supportId, location: this.#proxy.location }),
    };
  }

  /** /.well-known/tps-challenge?c=&n=&r=: a solution is checked, and a clearance given. */
  #verify<R extends GuardedRequest>(ctx: R, answers: GuardAnswers<R>, url: string, now: number, attackStart: number): Answer {
    const query = new URLSearchParams(url.slice(CHALLENGE_PATH.length + 1, CHALLENGE_PATH.length + 1 + 4096));
    const network = clearanceNetwork(ctx.clientIp);
    const key = sourceKey(ctx.clientIp, this.#deps.rateLimit?.ipv6Prefix);
    const solved =
      ctx.req.method === 'GET' &&
      this.#keys.verifySolution(this.#proxy.id, network, query.get('c') ?? '', query.get('n') ?? '', Math.floor(now / 1000));
    if (!solved) {
      this.#count('failed');
      const episode = attackStart > 0 ? attackStart : -(Math.floor(now / ALWAYS_WINDOW_MS) + 1);
      const op = this.#operator;
      const source = this.#detector.source(key, episode, now, true, op.maxUnsolved, op.blockSeconds * 1000);
      if (source.verdict === 'blocked' || source.verdict === 'just-blocked') {
        if (source.verdict === 'just-blocked') this.#block(ctx, key, source.blockedUntil);
        this.#detector.add(now, 'blocked', source.isNew);
        this.#count('blocked');
        return answers.page(ctx, 'rate-limit', ['retry-after', String(Math.max(1, Math.ceil((source.blockedUntil - now) / 1000)))]);
      }
      this.#detector.add(now, 'challenged', source.isNew);
      return this.#challenge(ctx, network, 0, 0, false, now);
    }
    this.#detector.solved(key, now);
    this.#detector.add(now, 'solved', false);
    this.#count('solved');
    const cookie =
      `${CLEARANCE_COOKIE}=${this.#keys.clearance(this.#proxy.id, network, Math.floor(now / 1000))}; Path=/; ` +
      `Max-Age=${this.#keys.clearanceSeconds}; HttpOnly; SameSite=Lax${ctx.secure ? '; Secure' : ''}`;
    return {
      phase: 'app-ddos',
      status: 302,
      headers: ['location', safeReturnPath(query.get('r') ?? '/'), 'set-cookie', cookie, 'cache-control', 'no-store'],
      body: '',
    };
  }

  /** Blocks the source in the rate limiter too, so that its cheaper refusal (and the kernel's) applies. */
  #block(ctx: GuardedRequest, key: string, until: number): void {
    const limiterStore = ctx.proxy.rateLimiter?.store;
    if (limiterStore !== undefined) {
      try {
        const done = limiterStore.block(key, until);
        if (done instanceof Promise) done.catch(() => undefined);
      } catch {
        // Our own block holds meanwhile.
      }
    }
    this.#deps.logger?.warn(
      { proxyId: this.#proxy.id, source: key, blockedUntil: new Date(until).toISOString() },
      'source blocked: it kept ignoring the challenge',
    );
  }

  #count(outcome: Parameters<NonNullable<AppDdosDeps['counted']>>[1]): void {
    this.#appDeps?.counted?.(this.#proxy.id, outcome);
  }

  /** The first request of an episode this thread owns is what its event shows. */
  #noteStart<R extends GuardedRequest>(ctx: R, answers: GuardAnswers<R>, attackStart: number): void {
    if (this.#seenEpisode === attackStart) return;
    this.#seenEpisode = attackStart;
    if (!this.#detector.owns(attackStart)) return;
    const key = `${this.#proxy.id}|${attackStart}`;
    if (episodeStarts.has(key)) return;
    if (episodeStarts.size >= MAX_EPISODE_STARTS) episodeStarts.delete(episodeStarts.keys().next().value!);
    episodeStarts.set(key, {
      source: { countryCode: ctx.country, ip: ctx.clientIp, port: ctx.clientPort },
      destinationIp: ctx.serverIp,
      request: answers.summary(ctx, CHALLENGE_STATUS),
    });
    this.#appDeps?.attackChanged?.(this.#proxy.id, true);
    this.#deps.logger?.warn(
      { proxyId: this.#proxy.id, startedAt: new Date(attackStart).toISOString() },
      'application-layer attack detected',
    );
  }

  /** This thread closed a second: its count goes to the cluster, the cluster's total of the second before comes back. */
  #exchange(): void {
    const closed = this.#detector.takeClosed();
    if (closed === undefined || this.#cluster === undefined) return;
    this.#cluster.exchange(this.#proxy.id, closed.second, closed.count).then(
      (total) => this.#detector.setClusterRate(closed.second - 1, total),
      (err: unknown) => {
        // Detection goes on with this node's own rate; said once per minute at most.
        const now = Date.now();
        if (now - this.#clusterErrorAt < 60_000) return;
        this.#clusterErrorAt = now;
        this.#deps.logger?.warn({ err, proxyId: this.#proxy.id }, 'app-ddos: cluster rate unavailable, detecting on this node only');
      },
    );
  }

  #tick(): void {
    let report: AttackReport | undefined;
    try {
      report = this.#detector.tick(Date.now());
      if (this.#cluster !== undefined) this.#exchange();
    } catch (err) {
      this.#deps.logger?.error({ err, proxyId: this.#proxy.id }, 'app-ddos detector tick failed');
      return;
    }
    if (report !== undefined) this.#record(report);
  }

  #record(report: AttackReport): void {
    const key = `${this.#proxy.id}|${report.startedAt}`;
    const start = episodeStarts.get(key);
    episodeStarts.delete(key);
    const ids = episodeIds(this.#proxy.id, report.startedAt, this.#appDeps?.nodeId);
    const event: DistributedAttackEvent = {
      id: ids.eventId,
      tenantId: this.#proxy.tenantId,
      trafficConfigId: this.#proxy.id,
      timestamp: new Date(report.startedAt).toISOString(),
      supportId: ids.supportId,
      tpc: this.#proxy.location,
      destinationIp: start?.destinationIp ?? this.#proxy.frontendIp,
      // Only if the owning worker is gone: the event then names no request.
      source: start?.source ?? { countryCode: 'ZZ', ip: '0.0.0.0', port: 0 },
      request: start?.request ?? { method: '', path: '', headers: [], messageHeader: '', statusCode: CHALLENGE_STATUS },
      type: 'APP_DDOS_ATTACK',
      action: 'CHALLENGED',
      rules: [],
      attack: {
        startedAt: new Date(report.startedAt).toISOString(),
        endedAt: new Date(report.endedAt).toISOString(),
        baselineRate: Math.round(report.baselineRate * 100) / 100,
        triggerRate: Math.round(report.triggerRate * 100) / 100,
        peakRate: report.peakRate,
        requests: report.requests,
        sources: report.sources,
        challenged: report.challenged,
        solved: report.solved,
        passed: report.passed,
        blocked: report.blocked,
        shed: report.shed,
        mode: this.#settings.mode === 'ALWAYS' ? 'ALWAYS' : 'AUTO',
      },
    };
    this.#appDeps?.attackChanged?.(this.#proxy.id, false);
    this.#deps.logger?.warn({ proxyId: this.#proxy.id, eventId: event.id, ...event.attack }, 'application-layer attack ended');
    try {
      this.#deps.insight.record(event);
    } catch (err) {
      this.#deps.logger?.error({ err, eventId: event.id }, 'insight sink failed to record an attack');
    }
  }
}

/**
 * A browser's request for an image, a script, a style or a fetch() of a page it already shows
 * (Sec-Fetch-Dest other than a document): challenged like any other, but not counted towards the
 * block, or a visitor whose open page reloads its assets when an attack starts would be blocked
 * for the assets. A client that sends such a header to avoid the block still never gets through.
 */
function browserSubresource(ctx: GuardedRequest): boolean {
  const dest = header(ctx, 'sec-fetch-dest');
  return dest !== undefined && dest !== 'document' && dest !== 'iframe' && dest !== 'frame';
}

function isChallengePath(url: string): boolean {
  return url.startsWith(CHALLENGE_PATH) && (url.length === CHALLENGE_PATH.length || url.charCodeAt(CHALLENGE_PATH.length) === 63) /* ? */;
}

function header(ctx: GuardedRequest, name: string): string | undefined {
  const value = ctx.req.headers[name];
  return Array.isArray(value) ? value.join('; ') : value;
}

/** A path on this site only: never another host (`//x`, `/\x`), never the challenge path again. */
export function safeReturnPath(path: string): string {
  if (path.length > MAX_RETURN_PATH || !path.startsWith('/') || path.startsWith('//') || path.startsWith('/\\')) return '/';
  if (isChallengePath(path) || hasControlCharacter(path)) return '/';
  return path;
}

/** A decoded `r` may hold CR/LF or other controls: never in a Location header. Non-ASCII too (header values are Latin-1). */
function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x20 || code >= 0x7f) return true;
  }
  return false;
}

/** The event id and support id of an episode, the same in every worker of the node (derived from the proxy, the start and the node). */
export function episodeIds(proxyId: string, attackStart: number, nodeId = ''): { eventId: string; supportId: string } {
  const hex = createHash('sha256').update(`app-ddos|${nodeId}|${proxyId}|${attackStart}`).digest('hex');
  const eventId = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
  return { eventId, supportId: hex.slice(32, 64) };
}
