/**
 * The edge node: watches the store, resolves every traffic configuration and hands the snapshot to
 * its proxy workers (one thread per core), then reports to the store what this node serves.
 *
 * - Live: the store revision is polled every POLL_MS; any change (configuration, certificate, CA
 *   certificate) sends a new snapshot. Workers leave unchanged configurations alone.
 * - Status: a configuration is ACTIVE on this node once every worker serves its current version,
 *   ERROR as soon as one worker cannot (the reason goes to `statusDetail`).
 * - Failure: a worker that dies is started again with the current snapshot; the others keep serving
 *   (they share the ports through SO_REUSEPORT), and nothing is lost: the store has it all.
 */
import { Worker } from 'node:worker_threads';
import os from 'node:os';
import { Counter, Gauge } from 'prom-client';
import type { Store } from '../../store/index.ts';
import type { SecretBox } from '../../certs/secret-box.ts';
import type { Metrics } from '../../metrics.ts';
import type { AppDdosAttackEvent, InsightEvent } from '../../insight/event.ts';
import { InsightSampler, type SamplerOutcome } from '../../insight/sampler.ts';
import { directInsightWrites, InsightWriteError, type InsightWrites } from '../../store/insight-writer.ts';
import type { EpisodeUpdate } from '../../store/insight-events.ts';
import { ConfigResolver, type CrlSource } from './resolve.ts';
import type { SharedTable } from '../shared-counters/shared-table.ts';
import { createRateTable } from '../shared-counters/shared-rate-store.ts';
import { createFloodTable } from '../shared-counters/shared-flood-limiter.ts';
import type { ConfigEntry, EdgeCounterName, FromWorker, ToWorker } from './messages.ts';
import type { ClientAddressSettings } from '../client-address/policy.ts';
import type { WorkerSettings } from './worker.ts';
import { ThreatFeedHost } from './threat-feed-host.ts';
import { sourceLabel } from '../l4/threat-feed.ts';

const POLL_MS = 200;
const HEARTBEAT_MS = 5_000;
const INSIGHT_FLUSH_MS = 200;
const RESTART_DELAY_MS = 200;
const EPISODE_MEMORY_MS = 10 * 60_000;
/**
 * Insight ingestion, bounded: events waiting for the store (past it, WAF events are counted into
 * sampled events instead, never held), events per write, how often the node's sampled events go
 * out, and the groups the node's sampler tracks (src/insight/sampler.ts).
 */
const INSIGHT_BACKLOG_LIMIT = 10_000;
const INSIGHT_WRITE_BATCH = 500;
const INSIGHT_SAMPLE_PERIOD_MS = 10_000;
const INSIGHT_SAMPLER_GROUPS = 10_000;
/** Rate-limit episodes whose counters wait to be written (one entry per episode, the latest counts). */
const EPISODE_UPDATES_LIMIT = 65_536;
const INSIGHT_LOG_EVERY_MS = 10_000;

interface EpisodeCounts {
  lastBlockedAt: string;
  blockedRequests: number;
  blockedUntil: string;
}
/** Per table: 65,536 clients (rate limits: x 264 bytes = 17 MiB; flood caps: x 48 bytes = 3 MiB), whatever the number of proxies or of flooding sources. */
const DEFAULT_SHARED_COUNTER_SLOTS = 65_536;

export interface EdgeLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

export interface EdgeOptions {
  store: Store;
  secrets: SecretBox;
  metrics: Metrics;
  logger: EdgeLogger;
  /** Level of the workers' own log lines (the process's TPS_LOG_LEVEL). */
  logLevel?: string;
  nodeId: string;
  location: string;
  workers?: number;
  /** Clients the shared rate-limit table holds across all proxies (bounded memory under floods). */
  sharedCounterSlots?: number;
  threatFeeds?: string[];
  threatFeedRefreshMs?: number;
  geoOverridesPath?: string | undefined;
  geoMmdbPath?: string | undefined;
  wafAuditLogPath?: string | undefined;
  /** WAF engine threads per proxy worker (the WAF runs off the workers' event loops). */
  wafThreads?: number;
  wafEngine?: 'modsecurity' | 'compiled';
  /** Body bytes the WAF inspects, and what happens to a longer request body. */
  wafBodyLimits?: { request: number; response: number; action: 'PROCESS_PARTIAL' | 'REJECT' };
  /** redis://... for rate-limit counters shared with other edge nodes. */
  redisUrl?: string | undefined;
  /** Load balancers in front of the edge (TPS_TRUSTED_PROXIES, TPS_LISTENER_PROXY_PROTOCOL); absent = none. */
  clientAddress?: ClientAddressSettings;
  crls?: CrlSource;
  /** Answers ACME HTTP-01 challenges (token, host) with the key authorization. */
  acmeChallenge?: (token: string, host: string) => Promise<string | undefined>;
  /** The TLS-ALPN-01 challenge certificate of a name, when one is pending. */
  acmeTlsAlpn?: (servername: string) => Promise<{ certPem: string; keyPem: string } | undefined>;
  /** Where insight events are written (the insight writer thread); default: the store, from this thread. */
  insightWrites?: InsightWrites;
  /** WAF events kept whole per proxy, source, matched rule set and minute (TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE). */
  insightWholeEventsPerMinute?: number;
}

interface WorkerSlot {
  index: number;
  worker: Worker | undefined;
  /** What this worker reported last, per configuration id. */
  reports: Map<string, { version: string; state: 'ACTIVE' | 'ERROR'; detail: string | null }>;
  /** Generation of the threat-feed set this worker says it uses. */
  threatFeedGeneration?: number;
}

interface Published {
  revision: number;
  state: 'ACTIVE' | 'ERROR';
  detail: string | null;
}

export class EdgeSupervisor {
  readonly #options: EdgeOptions;
  readonly #resolver: ConfigResolver;
  readonly #slots: WorkerSlot[];
  readonly #counters: Map<EdgeCounterName, Counter<string>>;
  readonly #rateTable: SharedTable;
  readonly #floodTable: SharedTable;
  #entries: ConfigEntry[] = [];
  /** Configuration id -> revision, of what the snapshot holds. */
  #revisions = new Map<string, number>();
  #published = new Map<string, Published>();
  #storeRevision = -1;
  #timers: NodeJS.Timeout[] = [];
  #stopping = false;
  #reloading: Promise<void> | undefined;
  readonly #insightWrites: InsightWrites;
  /** The node's second sampling stage: each worker samples its own requests first (worker.ts). */
  readonly #sampler: InsightSampler;
  /** Events waiting for the store, oldest first (at most INSIGHT_BACKLOG_LIMIT). */
  #backlog: InsightEvent[] = [];
  /** The APP_DDOS_ATTACK events of the backlog by id: an episode update changes them in place. */
  readonly #backlogEpisodes = new Map<string, AppDdosAttackEvent>();
  /** Episode counters for events already handed to the store (written after them, in order). */
  #episodeUpdates = new Map<string, EpisodeCounts>();
  #writing: Promise<boolean> | undefined;
  #lastSampleAt = Date.now();
  #lastInsightLog = 0;
  readonly #insightMetrics: { shed: Counter<string>; writeFailures: Counter<string> };
  #episodeCounts = new Map<string, { touchedAt: number; perWorker: Map<number, EpisodeCounts> }>();
  #reportQueue: Promise<void> = Promise.resolve();
  /** Reads and builds the node's threat feed off every serving loop; absent without sources. */
  readonly #threatFeed: ThreatFeedHost | undefined;

  constructor(options: EdgeOptions) {
    this.#options = options;
    this.#resolver = new ConfigResolver(options.store, options.secrets, options.crls);
    const workers = options.workers ?? Math.max(1, os.availableParallelism());
    this.#rateTable = createRateTable(options.sharedCounterSlots ?? DEFAULT_SHARED_COUNTER_SLOTS);
    this.#floodTable = createFloodTable(options.sharedCounterSlots ?? DEFAULT_SHARED_COUNTER_SLOTS);
    this.#slots = Array.from({ length: workers }, (_, index) => ({ index, worker: undefined, reports: new Map() }));
    this.#insightWrites = options.insightWrites ?? directInsightWrites(options.store.insightEvents);
    this.#sampler = new InsightSampler({ wholePerWindow: options.insightWholeEventsPerMinute ?? 10, maxGroups: INSIGHT_SAMPLER_GROUPS });
    if ((options.threatFeeds ?? []).length > 0) {
      this.#threatFeed = new ThreatFeedHost({
        sources: options.threatFeeds ?? [],
        refreshIntervalMs: options.threatFeedRefreshMs ?? 3_600_000,
        logger: options.logger,
        // Shared memory: every worker looks up in the same set, nothing is copied.
        onSet: ({ set, generation }) => {
          for (const slot of this.#slots) slot.worker?.postMessage({ kind: 'threat-feed', set, generation } satisfies ToWorker);
        },
      });
    }
    this.#counters = new Map(
      (
        [
          ['tps_edge_connections_total', 'Layer 4 connections (TCP) or sessions (UDP) admitted.', ['proxy', 'protocol']],
          ['tps_edge_refused_total', 'Connections or datagrams refused before reaching an origin, by reason.', ['proxy', 'protocol', 'reason']],
          ['tps_edge_bytes_total', 'Layer 4 payload bytes, by direction.', ['proxy', 'protocol', 'direction']],
          ['tps_edge_origin_failures_total', 'Connects to an origin host that failed.', ['proxy', 'protocol']],
          ['tps_edge_http_requests_total', 'HTTP requests by status and by the phase that answered.', ['proxy', 'status', 'answered_by']],
          [
            'tps_insight_sampled_requests_total',
            'WAF requests counted into a sampled event (their number is in its requestCount) instead of stored as events of their own.',
            [],
          ],
          [
            'tps_insight_overflow_requests_total',
            "WAF requests counted into a proxy-wide sampled event because the sampler's groups (source, rule set) were full: their source and rules are not kept.",
            [],
          ],
          ['tps_insight_dropped_requests_total', 'WAF requests neither stored nor counted: the sampler had no room at all (a long store outage).', []],
        ] as const
      ).map(([name, help, labelNames]) => [name, new Counter({ name, help, labelNames: [...labelNames], registers: [options.metrics.registry] })]),
    );
    const registers = [options.metrics.registry];
    const backlog = () => this.#backlog.length;
    new Gauge({
      name: 'tps_insight_backlog_events',
      help: `Insight events waiting to be written to the store (at most ${INSIGHT_BACKLOG_LIMIT}; past it, WAF events are counted into sampled events).`,
      registers,
      collect() {
        this.set(backlog());
      },
    });
    this.#insightMetrics = {
      shed: new Counter({
        name: 'tps_insight_backlog_shed_total',
        help: 'WAF events counted into a sampled event instead of kept whole because the backlog to the store was full.',
        registers,
      }),
      writeFailures: new Counter({ name: 'tps_insight_write_failures_total', help: 'Insight writes to the store that failed (retried).', registers }),
    };
    const feed = this.#threatFeed;
    if (feed !== undefined) {
      // Read at scrape time from the feed thread's last report: an operator alerts on a source that fails.
      new Gauge({
        name: 'tps_edge_threat_feed_prefixes',
        help: 'Disjoint prefixes in the threat-feed set the workers use.',
        registers,
        collect() {
          const report = feed.report;
          if (report !== undefined) this.set(report.size);
        },
      });
      new Gauge({
        name: 'tps_edge_threat_feed_source_up',
        help: 'Whether the last read of a threat-feed source succeeded (1) or failed (0; its last good entries stay in use).',
        labelNames: ['source'],
        registers,
        collect() {
          for (const source of feed.report?.sources ?? []) this.set({ source: sourceLabel(source.source) }, source.ok ? 1 : 0);
        },
      });
      new Gauge({
        name: 'tps_edge_threat_feed_source_entries',
        help: 'Addresses and networks of a threat-feed source (its last good read).',
        labelNames: ['source'],
        registers,
        collect() {
          for (const source of feed.report?.sources ?? []) this.set({ source: sourceLabel(source.source) }, source.entries);
        },
      });
    }
  }

  async start(): Promise<void> {
    await this.#options.store.edgeStatus.heartbeat(this.#options.nodeId, this.#options.location);
    await this.#reload();
    this.#threatFeed?.start();
    for (const slot of this.#slots) this.#spawn(slot);
    this.#timers.push(
      setInterval(() => void this.#poll(), POLL_MS),
      setInterval(() => void this.#heartbeat(), HEARTBEAT_MS),
      setInterval(() => void this.#flushInsight(), INSIGHT_FLUSH_MS),
    );
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    for (const timer of this.#timers) clearInterval(timer);
    await this.#threatFeed?.stop();
    await Promise.all(
      this.#slots.map(async (slot) => {
        const worker = slot.worker;
        if (!worker) return;
        const exited = new Promise((resolve) => worker.once('exit', resolve));
        worker.postMessage({ kind: 'stop' } satisfies ToWorker);
        const timeout = setTimeout(() => void worker.terminate(), 5_000);
        await exited;
        clearTimeout(timeout);
      }),
    );
    await this.#drainInsight();
    await this.#reportQueue;
    await this.#options.store.edgeStatus.leave(this.#options.nodeId).catch(() => {});
  }

  /** How many workers serve the current version of a configuration. */
  servingWorkers(configId: string): number {
    const entry = this.#entries.find((candidate) => candidate.config.id === configId);
    if (!entry) return 0;
    return this.#slots.filter((slot) => {
      const report = slot.reports.get(configId);
      return slot.worker && report?.version === entry.version && report.state === 'ACTIVE';
    }).length;
  }

  /** How many workers look up in the node's current threat-feed set (all of them, once it has reached them). */
  threatFeedWorkers(): number {
    const generation = this.#threatFeed?.current?.generation;
    return this.#slots.filter((slot) => slot.worker && generation !== undefined && slot.threatFeedGeneration === generation).length;
  }

  /**
   * Kills one worker (for tests of the restart): the others keep serving. Resolves once its thread
   * is gone; connections it had accepted by then die with it, as in a real crash.
   */
  async crashWorkerForTest(index: number): Promise<void> {
    await this.#slots[index]?.worker?.terminate();
  }

  #spawn(slot: WorkerSlot): void {
    const o = this.#options;
    const settings: WorkerSettings = {
      index: slot.index,
      logLevel: o.logLevel ?? 'info',
      nodeId: o.nodeId,
      rateTable: this.#rateTable.init,
      floodTable: this.#floodTable.init,
      location: o.location,
      threatFeed: this.#threatFeed?.current,
      geoOverridesPath: o.geoOverridesPath,
      geoMmdbPath: o.geoMmdbPath,
      wafAuditLogPath: o.wafAuditLogPath,
      wafThreads: o.wafThreads ?? 1,
      wafEngine: o.wafEngine ?? 'compiled',
      wafBodyLimits: o.wafBodyLimits ?? { request: 128 * 1024, response: 64 * 1024, action: 'PROCESS_PARTIAL' },
      redisUrl: o.redisUrl,
      clientAddress: o.clientAddress ?? { trustedProxies: [], listenerProxyProtocol: 'off' },
      insightWholeEventsPerMinute: o.insightWholeEventsPerMinute ?? 10,
    };
    const worker = new Worker(new URL('./worker.ts', import.meta.url), { workerData: settings, name: `tps-edge-${slot.index}` });
    slot.worker = worker;
    slot.reports.clear();
    delete slot.threatFeedGeneration;
    worker.on('message', (message: FromWorker) => this.#onMessage(slot, message));
    worker.on('error', (error) => o.logger.error({ err: error, worker: slot.index }, 'edge worker failed'));
    worker.on('exit', (code) => {
      if (slot.worker !== worker) return;
      slot.worker = undefined;
      if (this.#stopping) return;
      o.logger.warn({ worker: slot.index, code }, 'edge worker exited; starting it again');
      setTimeout(() => {
        if (!this.#stopping) this.#spawn(slot);
      }, RESTART_DELAY_MS).unref();
    });
  }

  #onMessage(slot: WorkerSlot, message: FromWorker): void {
    switch (message.kind) {
      case 'ready':
        slot.worker?.postMessage({ kind: 'apply', entries: this.#entries } satisfies ToWorker);
        break;
      case 'status':
        slot.reports.set(message.id, { version: message.version, state: message.state, detail: message.detail });
        this.#publish(message.id);
        break;
      case 'removed':
        slot.reports.delete(message.id);
        break;
      case 'insight':
        this.#admitInsight(message.event);
        break;
      case 'insight-update':
        this.#updateEpisode(message.eventId, this.#combineEpisodeCounts(slot.index, message.eventId, message.update));
        break;
      case 'acme-lookup': {
        const lookup = this.#options.acmeChallenge ?? (async () => undefined);
        void lookup(message.token, message.host)
          .catch(() => undefined)
          .then((keyAuthorization) =>
            slot.worker?.postMessage({ kind: 'acme-answer', requestId: message.requestId, keyAuthorization } satisfies ToWorker),
          );
        break;
      }
      case 'acme-alpn-lookup': {
        const lookup = this.#options.acmeTlsAlpn ?? (async () => undefined);
        void lookup(message.servername)
          .catch(() => undefined)
          .then((certificate) =>
            slot.worker?.postMessage({ kind: 'acme-alpn-answer', requestId: message.requestId, certificate } satisfies ToWorker),
          );
        break;
      }
      case 'counters':
        for (const increment of message.counters) this.#counters.get(increment.name)?.inc(increment.labels, increment.value);
        break;
      case 'threat-feed-applied':
        slot.threatFeedGeneration = message.generation;
        break;
      case 'stopped':
        break;
    }
  }

  async #poll(): Promise<void> {
    if (this.#reloading) return;
    try {
      const revision = await this.#options.store.revision();
      if (revision === this.#storeRevision) return;
      this.#reloading = this.#reload();
      await this.#reloading;
    } catch (error) {
      this.#options.logger.error({ err: error }, 'edge could not read the store');
    } finally {
      this.#reloading = undefined;
    }
  }

  async #reload(): Promise<void> {
    const { store } = this.#options;
    const revision = await store.revision();
    const records = await store.trafficConfigs.listAll();
    const entries: ConfigEntry[] = [];
    const revisions = new Map<string, number>();
    const unresolved = new Map<string, { revision: number; detail: string }>();
    for (const record of records) {
      revisions.set(record.id, record.revision);
      try {
        const resolved = await this.#resolver.resolve(record);
        if ('unresolved' in resolved) unresolved.set(record.id, { revision: record.revision, detail: resolved.unresolved });
        else entries.push(resolved);
      } catch (error) {
        unresolved.set(record.id, { revision: record.revision, detail: `cannot be prepared: ${(error as Error).message}` });
      }
    }
    this.#storeRevision = revision;
    this.#entries = entries;
    this.#revisions = revisions;
    for (const slot of this.#slots) slot.worker?.postMessage({ kind: 'apply', entries } satisfies ToWorker);
    for (const [id, { revision: configRevision, detail }] of unresolved) this.#report(id, { revision: configRevision, state: 'ERROR', detail });
    for (const id of this.#published.keys()) {
      if (revisions.has(id)) continue;
      this.#published.delete(id);
      this.#enqueueReport(() => store.edgeStatus.forget(this.#options.nodeId, id));
    }
    this.#options.metrics.edgeConfigs.reset();
    for (const record of records) this.#options.metrics.edgeConfigs.inc({ type: record.type, state: unresolved.has(record.id) ? 'ERROR' : 'LOADED' });
  }

  /** Combines the workers' reports on one configuration into this node's status for it. */
  #publish(id: string): void {
    const entry = this.#entries.find((candidate) => candidate.config.id === id);
    const revision = this.#revisions.get(id);
    if (!entry || revision === undefined) return;
    const reports = this.#slots.map((slot) => slot.reports.get(id));
    const current = reports.filter((report) => report?.version === entry.version);
    const failure = current.find((report) => report?.state === 'ERROR');
    if (failure) this.#report(id, { revision, state: 'ERROR', detail: failure.detail });
    else if (current.length === this.#slots.length) this.#report(id, { revision, state: 'ACTIVE', detail: null });
  }

  #report(id: string, status: Published): void {
    const previous = this.#published.get(id);
    if (previous && previous.revision === status.revision && previous.state === status.state && previous.detail === status.detail) return;
    this.#published.set(id, status);
    const { store, nodeId } = this.#options;
    this.#enqueueReport(() => store.edgeStatus.report(nodeId, id, status.revision, status.state, status.detail));
  }

  /** Status writes go out in order, one at a time: the last word on a configuration is the latest. */
  #enqueueReport(write: () => Promise<void>): void {
    this.#reportQueue = this.#reportQueue.then(write).catch((error: unknown) => {
      this.#options.logger.error({ err: error }, 'edge could not report a status');
    });
  }

  async #heartbeat(): Promise<void> {
    try {
      await this.#options.store.edgeStatus.heartbeat(this.#options.nodeId, this.#options.location);
    } catch (error) {
      this.#options.logger.error({ err: error }, 'edge heartbeat failed');
    }
  }

  /** An event from a worker: kept whole (into the backlog) or counted into the node's sample of its group. */
  #admitInsight(event: InsightEvent): void {
    const outcome = this.#sampler.admit(event);
    if (outcome === 'whole') {
      this.#enqueueInsight(event);
      return;
    }
    // A worker's sample was counted in the worker already (unless it is lost here).
    const workerSample = event.type === 'WAF_EVENT' && event.requestCount !== undefined;
    if (!workerSample) this.#countSampled(outcome);
    else if (outcome === 'dropped') this.#countSampled(outcome, event.requestCount);
  }

  #countSampled(outcome: SamplerOutcome, requests = 1): void {
    if (outcome === 'counted') this.#counters.get('tps_insight_sampled_requests_total')?.inc(requests);
    else if (outcome === 'overflow') this.#counters.get('tps_insight_overflow_requests_total')?.inc(requests);
    else if (outcome === 'dropped') this.#counters.get('tps_insight_dropped_requests_total')?.inc(requests);
  }

  /**
   * Into the backlog, while it has room. Past it a WAF event is counted into its group's sample
   * (the dashboards' numbers stay whole, memory does not grow); an APP_DDOS_ATTACK event (one per
   * client and episode, bounded by the rate-limit table) may take a second backlog's worth.
   */
  #enqueueInsight(event: InsightEvent, front = false): void {
    const room = event.type === 'WAF_EVENT' ? INSIGHT_BACKLOG_LIMIT : 2 * INSIGHT_BACKLOG_LIMIT;
    if (this.#backlog.length >= room) {
      if (event.type === 'WAF_EVENT') {
        this.#insightMetrics.shed.inc();
        const outcome = this.#sampler.count(event);
        if (outcome === 'dropped') this.#countSampled(outcome, event.requestCount ?? 1);
      } else {
        this.#countSampled('dropped');
      }
      this.#logInsight({ backlog: this.#backlog.length }, 'insight backlog full: WAF events are counted into sampled events');
      return;
    }
    if (front) this.#backlog.unshift(event);
    else this.#backlog.push(event);
    if (event.type === 'APP_DDOS_ATTACK') this.#backlogEpisodes.set(event.id, event);
  }

  /** Writes what waits, one batch at a time (never two writes at once: events keep their order). */
  async #flushInsight(final = false): Promise<void> {
    if (this.#writing) return;
    const now = Date.now();
    if (final || now - this.#lastSampleAt >= INSIGHT_SAMPLE_PERIOD_MS) {
      this.#lastSampleAt = now;
      const room = final ? Number.POSITIVE_INFINITY : INSIGHT_BACKLOG_LIMIT - this.#backlog.length;
      for (const sample of this.#sampler.takeSamples(now, Math.max(0, room))) {
        this.#backlog.push(sample);
      }
    }
    if (this.#backlog.length === 0 && this.#episodeUpdates.size === 0) return;
    const batch = this.#backlog.splice(0, INSIGHT_WRITE_BATCH);
    for (const event of batch) if (event.type === 'APP_DDOS_ATTACK') this.#backlogEpisodes.delete(event.id);
    const updates: EpisodeUpdate[] = [...this.#episodeUpdates].map(([eventId, update]) => ({ eventId, update }));
    this.#episodeUpdates = new Map();
    this.#writing = this.#writeInsight(batch, updates);
    let written = false;
    try {
      written = await this.#writing;
    } finally {
      this.#writing = undefined;
    }
    // A flood's backlog goes out batch after batch, not one batch per tick.
    if (written && !final && this.#backlog.length >= INSIGHT_WRITE_BATCH) setImmediate(() => void this.#flushInsight());
  }

  async #writeInsight(batch: InsightEvent[], updates: EpisodeUpdate[]): Promise<boolean> {
    try {
      await this.#insightWrites.write(batch, updates);
      return true;
    } catch (error) {
      this.#insightMetrics.writeFailures.inc();
      // Back to the front, in order; what no longer fits is counted into sampled events.
      const written = error instanceof InsightWriteError ? error.written : 0;
      const unwritten = batch.slice(written);
      for (let index = unwritten.length - 1; index >= 0; index--) this.#enqueueInsight(unwritten[index]!, true);
      for (const { eventId, update } of updates) {
        if (!this.#episodeUpdates.has(eventId)) this.#episodeUpdates.set(eventId, update);
      }
      this.#logInsight({ err: error, events: unwritten.length }, 'insight events could not be stored; will retry');
      return false;
    }
  }

  /** Writes everything that waits (stopping): samples included, until done or the store fails. */
  async #drainInsight(): Promise<void> {
    await this.#writing;
    for (let failures = 0; failures < 3; ) {
      const before = this.#backlog.length;
      await this.#flushInsight(true);
      if (this.#backlog.length === 0 && this.#episodeUpdates.size === 0) return;
      if (this.#backlog.length >= before) failures++;
    }
  }

  #logInsight(details: object, message: string): void {
    const now = Date.now();
    if (now - this.#lastInsightLog < INSIGHT_LOG_EVERY_MS) return;
    this.#lastInsightLog = now;
    this.#options.logger.error(details, message);
  }

  /**
   * Each worker counts the requests it refused in an episode; the event shows their sum. Episodes
   * are forgotten here some minutes after their last update (bounded memory).
   */
  #combineEpisodeCounts(worker: number, eventId: string, update: EpisodeCounts): EpisodeCounts {
    const now = Date.now();
    for (const [id, episode] of this.#episodeCounts) {
      if (now - episode.touchedAt > EPISODE_MEMORY_MS) this.#episodeCounts.delete(id);
    }
    let episode = this.#episodeCounts.get(eventId);
    if (!episode) {
      episode = { touchedAt: now, perWorker: new Map() };
      this.#episodeCounts.set(eventId, episode);
    }
    episode.touchedAt = now;
    episode.perWorker.set(worker, update);
    const all = [...episode.perWorker.values()];
    return {
      blockedRequests: all.reduce((sum, counts) => sum + counts.blockedRequests, 0),
      lastBlockedAt: all.map((counts) => counts.lastBlockedAt).sort().at(-1)!,
      blockedUntil: all.map((counts) => counts.blockedUntil).sort().at(-1)!,
    };
  }

  #updateEpisode(eventId: string, update: EpisodeCounts): void {
    const waiting = this.#backlogEpisodes.get(eventId);
    if (waiting) {
      Object.assign(waiting.rateLimit, update);
      return;
    }
    // Handed to the store already (or being written): the update follows it in the next write.
    if (this.#episodeUpdates.size >= EPISODE_UPDATES_LIMIT && !this.#episodeUpdates.has(eventId)) {
      this.#logInsight({ eventId }, 'too many rate-limit episode updates waiting for the store: this one is not written');
      return;
    }
    this.#episodeUpdates.set(eventId, update);
  }
}
