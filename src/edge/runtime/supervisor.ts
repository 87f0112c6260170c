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
import type { InsightEvent } from '../../insight/event.ts';
import { ConfigResolver, type CrlSource } from './resolve.ts';
import type { SharedTable } from '../shared-counters/shared-table.ts';
import { createRateTable } from '../shared-counters/shared-rate-store.ts';
import { createFloodTable } from '../shared-counters/shared-flood-limiter.ts';
import type { ConfigEntry, EdgeCounterName, FromWorker, ToWorker, WafBodyLimits } from './messages.ts';
import { DEFAULT_QUEUE_PER_WORKER } from '../http/waf/fair-admission.ts';
import type { ClientAddressSettings } from '../client-address/policy.ts';
import type { WorkerSettings } from './worker.ts';
import { ThreatFeedHost } from './threat-feed-host.ts';
import { sourceLabel } from '../l4/threat-feed.ts';

const POLL_MS = 200;
const HEARTBEAT_MS = 5_000;
const INSIGHT_FLUSH_MS = 200;
const RESTART_DELAY_MS = 200;
const EPISODE_MEMORY_MS = 10 * 60_000;

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
  /** Requests that may wait for a WAF thread, per thread. */
  wafQueueLength?: number;
  wafEngine?: 'modsecurity' | 'compiled';
  /** Body bytes the WAF inspects, and what happens to a longer request body. */
  wafBodyLimits?: WafBodyLimits;
  /** redis://... for rate-limit counters shared with other edge nodes. */
  redisUrl?: string | undefined;
  /** Load balancers in front of the edge (TPS_TRUSTED_PROXIES, TPS_LISTENER_PROXY_PROTOCOL); absent = none. */
  clientAddress?: ClientAddressSettings;
  crls?: CrlSource;
  /** Answers ACME HTTP-01 challenges (token, host) with the key authorization. */
  acmeChallenge?: (token: string, host: string) => Promise<string | undefined>;
  /** The TLS-ALPN-01 challenge certificate of a name, when one is pending. */
  acmeTlsAlpn?: (servername: string) => Promise<{ certPem: string; keyPem: string } | undefined>;
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
  #insightBuffer: InsightEvent[] = [];
  /** Batches taken from the buffer and not yet stored (an episode update waits for its event's). */
  readonly #appending = new Set<{ batch: InsightEvent[]; done: Promise<void> }>();
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
            'tps_edge_waf_uninspected_total',
            "Requests (side=request) or responses (side=response) the WAF could not inspect, by reason (overloaded, unavailable, error) and by what the proxy's waf.failMode did (outcome=refused: 503; passed: sent on uninspected).",
            ['proxy', 'side', 'reason', 'outcome'],
          ],
          [
            'tps_edge_waf_body_over_limit_total',
            'Request bodies longer than the WAF inspects, by what was done: REJECT (413) or PROCESS_PARTIAL (first part inspected, the rest passed).',
            ['proxy', 'action'],
          ],
          [
            'tps_edge_waf_exchanges_total',
            'WAF exchanges (a request kept for its response) opened, and ended: inspected (response side), abandoned (request over first), expired (TTL: a leak).',
            ['event'],
          ],
        ] as const
      ).map(([name, help, labelNames]) => [name, new Counter({ name, help, labelNames: [...labelNames], registers: [options.metrics.registry] })]),
    );
    const feed = this.#threatFeed;
    if (feed !== undefined) {
      // Read at scrape time from the feed thread's last report: an operator alerts on a source that fails.
      const registers = [options.metrics.registry];
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
    await this.#flushInsight();
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
      wafQueueLength: o.wafQueueLength ?? DEFAULT_QUEUE_PER_WORKER,
      wafEngine: o.wafEngine ?? 'compiled',
      wafBodyLimits: o.wafBodyLimits ?? { request: 128 * 1024, multipart: 1024 * 1024, response: 64 * 1024, action: 'REJECT' },
      redisUrl: o.redisUrl,
      clientAddress: o.clientAddress ?? { trustedProxies: [], listenerProxyProtocol: 'off' },
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
        this.#insightBuffer.push(message.event);
        break;
      case 'insight-update':
        void this.#updateEpisode(message.eventId, this.#combineEpisodeCounts(slot.index, message.eventId, message.update));
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

  async #flushInsight(): Promise<void> {
    if (this.#insightBuffer.length === 0) return;
    const batch = this.#insightBuffer;
    this.#insightBuffer = [];
    const appending = { batch, done: this.#append(batch) };
    this.#appending.add(appending);
    try {
      await appending.done;
    } finally {
      this.#appending.delete(appending);
    }
  }

  async #append(batch: InsightEvent[]): Promise<void> {
    try {
      await this.#options.store.insightEvents.append(batch);
    } catch (error) {
      // Put them back: a store outage must not lose events (bounded, so a long outage cannot exhaust memory).
      this.#insightBuffer = [...batch, ...this.#insightBuffer].slice(-100_000);
      this.#options.logger.error({ err: error, events: batch.length }, 'insight events could not be stored; will retry');
    }
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

  async #updateEpisode(eventId: string, update: EpisodeCounts): Promise<void> {
    for (;;) {
      const buffered = this.#insightBuffer.find((event) => event.id === eventId);
      if (buffered?.type === 'APP_DDOS_ATTACK') {
        Object.assign(buffered.rateLimit, update);
        return;
      }
      // while its batch is being stored the event is neither buffered nor stored yet: wait for the
      // append, which either stores it or puts it back in the buffer (else this update is lost)
      const appending = [...this.#appending].find((a) => a.batch.some((event) => event.id === eventId));
      if (appending === undefined) break;
      await appending.done;
    }
    try {
      const stored = await this.#options.store.insightEvents.get(eventId);
      if (stored?.type !== 'APP_DDOS_ATTACK') return;
      Object.assign(stored.rateLimit, update);
      await this.#options.store.insightEvents.update(stored);
    } catch (error) {
      this.#options.logger.error({ err: error }, 'rate-limit episode could not be updated');
    }
  }
}
