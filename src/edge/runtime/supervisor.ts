/**
 * The edge node: watches the store, resolves every traffic configuration and hands the snapshot to
 * its proxy workers (one thread per core), then reports to the store what this node serves.
 *
 * - Live: the store revision is polled every POLL_MS; any change (configuration, certificate, CA
 *   certificate) sends a new snapshot. Workers leave unchanged configurations alone.
 * - Status: a configuration is ACTIVE on this node once every worker serves its current version,
 *   ERROR as soon as one worker cannot (the reason goes to `statusDetail`).
 * - Bindings: one configuration per front-end (ip, port, protocol), decided here for every worker
 *   (binding-arbiter.ts); a configuration refused a binding is not handed to the workers at all.
 * - Failure: a worker that dies is started again with the current snapshot; the others keep serving
 *   (they share the ports through SO_REUSEPORT), and nothing is lost: the store has it all.
 */
import { Worker } from 'node:worker_threads';
import { X509Certificate } from 'node:crypto';
import os from 'node:os';
import { Counter, Gauge } from 'prom-client';
import type { Store } from '../../store/index.ts';
import type { SecretBox } from '../../certs/secret-box.ts';
import type { Metrics } from '../../metrics.ts';
import { directInsightWrites, type InsightWrites } from '../../store/insight-writer.ts';
import { InsightIngest, type EpisodeCounts } from './insight-ingest.ts';
import { ConfigResolver, type CrlSource } from './resolve.ts';
import { arbitrateBindings } from './binding-arbiter.ts';
import { ProxyCounterTableSet } from '../shared-counters/proxy-tables.ts';
import { NodeConnectionBudget } from '../shared-counters/node-connection-budget.ts';
import type { ConfigEntry, FromWorker, ToWorker, WafBodyLimits } from './messages.ts';
import { EDGE_COUNTERS, EDGE_HISTOGRAMS, type EdgeCounterName, type EdgeHistogramName } from './metric-catalogue.ts';
import { DEFAULT_EXPENSIVE_CLIENT_SHARE, DEFAULT_QUEUE_PER_WORKER, DEFAULT_REQUEST_BUDGET_MS } from '@tps/waf';
import type { WafInputLimits } from '@tps/waf';
import { type BudgetOffenderSettings, DEFAULT_BUDGET_OFFENDERS } from '../http/waf/budget-offenders.ts';
import type { ClientAddressSettings } from '../../net/types.ts';
import type { OriginPolicySettings } from '../../net/origin-policy.ts';
import type { WorkerSettings } from './worker.ts';
import type { AppDdosOperatorSettings } from '../http/app-ddos/types.ts';
import { ThreatFeedHost } from './threat-feed-host.ts';
import type { EdgeLogger, StartThread } from './types.ts';
import { MergedHistogram } from './histograms.ts';
import { ApplyTracking } from './apply-tracking.ts';
import { EdgeWorkers, type WorkerSlot } from './workers.ts';
import { edgeHealth, type EdgeHealth } from './health.ts';
import { sourceLabel } from '../l4/threat-feed.ts';
import type { AccessLogSettings } from '../access-log/access-log.ts';
import type { InsightEvent } from '@tps/model';
import { DEFAULT_ESCALATION_FACTOR, KernelBlocking, type BlockTarget } from '../kernel-blocking/kernel-blocking.ts';
import type { KernelBlockingMode } from '../kernel-blocking/types.ts';
import type { RateLimitStoreSettings } from '../limits/types.ts';
import type { RefusalEngineMode } from '../http/refusal-engine.ts';

const POLL_MS = 200;
const HEARTBEAT_MS = 5_000;
const INSIGHT_FLUSH_MS = 200;
const EPISODE_MEMORY_MS = 10 * 60_000;
/** The status detail of an l4Proxy whose threat intelligence is on while the node has no threat feed. */
export const NO_THREAT_FEED_DETAIL =
  'threatIntelligence is enabled but this edge node has no threat feed (TPS_THREAT_FEEDS is empty): no source is refused';

/**
 * Sources each proxy tracks for its connection caps (x 48 bytes: 384 KiB a proxy). Past it, the
 * least recently used source is recycled; the proxy's total stays exact.
 */
const FLOOD_SLOTS_PER_PROXY = 8_192;

const newWorker: StartThread = (script, options) => new Worker(script, options);

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
  /** Clients each rate-limited proxy keeps counters for, in its own table (bounded memory under floods). */
  rateLimitClientsPerProxy?: number;
  /** IPv6 clients are counted per prefix of this length (rate limits, connection caps). Default 64. */
  ipv6SourcePrefix?: number;
  /** HTTP proxies' connection caps where a proxy sets none (TPS_HTTP_MAX_*). */
  httpConnectionLimits?: { maxConnectionsPerSource: number; maxNewConnectionsPerSecondPerSource: number; maxConnections: number };
  /** UDP: bytes back per byte in until the client has shown it receives (TPS_UDP_REPLY_BUDGET_FACTOR). */
  udpReplyBudgetFactor?: number;
  /** Client connections (HTTP, layer 4 TCP) and UDP sessions the node's workers hold at once, together (TPS_EDGE_MAX_CONNECTIONS); absent: no budget. */
  maxConnections?: number;
  /** UDP: sessions per relay not yet confirmed (TPS_UDP_MAX_UNCONFIRMED_SESSIONS). */
  udpMaxUnconfirmedSessions?: number;
  threatFeeds?: string[];
  threatFeedRefreshMs?: number;
  geoOverridesPath?: string | undefined;
  geoMmdbPath?: string | undefined;
  wafAuditLogPath?: string | undefined;
  /** WAF engine threads per proxy worker (the WAF runs off the workers' event loops). */
  wafThreads?: number;
  /** Requests that may wait for a WAF thread, per thread. */
  wafQueueLength?: number;
  /** Percent of a worker's WAF threads' time one expensive client may use; default 2. */
  wafExpensiveClientPercent?: number;
  /** How long a request's WAF transaction waits for its response; default 120 s. */
  wafExchangeTtlMs?: number;
  /** Early refusal of clients that keep running past the WAF's budget; default DEFAULT_BUDGET_OFFENDERS. */
  wafBudgetOffenders?: BudgetOffenderSettings;
  wafEngine?: 'modsecurity' | 'compiled';
  /** Body bytes the WAF inspects, and what happens to a longer request body. */
  wafBodyLimits?: WafBodyLimits;
  /** Wall time of one inspection before it ends (TPS_WAF_REQUEST_BUDGET_MS); default 250 ms. */
  wafRequestBudgetMs?: number;
  /** Defaults of proxies' `waf.inputLimits` (TPS_WAF_*_LIMIT); absent: the engine's. */
  wafInputLimits?: WafInputLimits;
  /** redis://... for rate-limit counters shared with other edge nodes. */
  redisUrl?: string | undefined;
  /** What rate limits do while Redis does not answer, and how long an answer may take. Default local, 250 ms. */
  rateLimitStore?: RateLimitStoreSettings;
  /** Load balancers in front of the edge (TPS_TRUSTED_PROXIES, TPS_LISTENER_PROXY_PROTOCOL); absent = none. */
  clientAddress?: ClientAddressSettings;
  /**
   * Where proxies may connect (the origin policy, with the node's own listeners) and the DNS servers
   * that resolve origin names (TPS_ORIGIN_RESOLVER; empty: the system resolver). No default: the
   * caller knows the node's listeners.
   */
  origins: { policy: OriginPolicySettings; resolverServers: string[] };
  crls?: CrlSource;
  /** Answers ACME HTTP-01 challenges (token, host) of orders placed by `tenantId` (the proxy's tenant) with the key authorization. */
  acmeChallenge?: (token: string, host: string, tenantId: string) => Promise<string | undefined>;
  /** The TLS-ALPN-01 challenge certificate of a name, when `tenantId` (the proxy's tenant) has an order pending for it. */
  acmeTlsAlpn?: (servername: string, tenantId: string) => Promise<{ certPem: string; keyPem: string } | undefined>;
  /** Starts the proxy worker threads and the threat-feed thread; default `new Worker`. */
  startThread?: StartThread;
  /** Where insight events are written (the insight writer thread); default: the store, from this thread. */
  insightWrites?: InsightWrites;
  /** WAF events kept whole per proxy, source, matched rule set and minute (TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE). */
  insightWholeEventsPerMinute?: number;
  /** One JSON line per request and layer 4 connection, written by each worker (TPS_ACCESS_LOG); absent = none. */
  accessLog?: AccessLogSettings;
  /** Operator settings of the application-layer DDoS protection (TPS_APP_DDOS_*); absent: the defaults. */
  appDdos?: Partial<AppDdosOperatorSettings>;
  /** Where the events this node stored go too, once each, in order (TPS_EVENT_SINKS); closed when the edge stops. */
  eventSinks?: { ship(events: readonly InsightEvent[]): void; close(): Promise<void> };
  /** Escalated sources dropped by nftables (TPS_KERNEL_BLOCKING, TPS_KERNEL_BLOCKING_ESCALATION_FACTOR). Default off. */
  kernelBlocking?: { mode: KernelBlockingMode; escalationFactor?: number };
  /** Blocked sources' repeated requests on the native engine when it is built, or on the JavaScript path (TPS_EARLY_REFUSAL_ENGINE). Default auto. */
  earlyRefusalEngine?: RefusalEngineMode;
  /** Simple plain HTTP/1.1 requests on the handle front end, or all on node:http (TPS_HTTP1_FRONT_END). Default handles. */
  http1FrontEnd?: 'handles' | 'node';
}

interface Published {
  revision: number;
  state: 'ACTIVE' | 'PROVISIONING' | 'ERROR';
  detail: string | null;
}

export class EdgeSupervisor {
  readonly #options: EdgeOptions;
  readonly #resolver: ConfigResolver;
  readonly #workers: EdgeWorkers;
  readonly #counters: Map<EdgeCounterName, Counter<string>>;
  readonly #counterTables: ProxyCounterTableSet;
  /** The node's budget of edge connections in shared memory, handed to every worker; absent: none. */
  readonly #connectionBudget: SharedArrayBuffer | undefined;
  #entries: ConfigEntry[] = [];
  /** Configuration id -> revision, of what the snapshot holds. */
  #revisions = new Map<string, number>();
  #published = new Map<string, Published>();
  /** Configurations refused a binding at the last reload (logged once per refusal, not per reload). */
  #bindingRefused = new Set<string>();
  #storeRevision = -1;
  #timers: NodeJS.Timeout[] = [];
  #stopping = false;
  #reloading: Promise<void> | undefined;
  /** The node's insight: its sampling stage (each worker samples its own requests first), backlog and writes. */
  readonly #insight: InsightIngest;
  #episodeCounts = new Map<string, { touchedAt: number; perWorker: Map<number, EpisodeCounts> }>();
  #reportQueue: Promise<void> = Promise.resolve();
  /** Reads and builds the node's threat feed off every serving loop; absent without sources. */
  readonly #threatFeed: ThreatFeedHost | undefined;
  /** The workers' latency histograms, merged. */
  readonly #histograms: Map<EdgeHistogramName, MergedHistogram>;
  /** When a worker last exited or was started: its configurations get the grace again (the others serve meanwhile). */
  #workersChangedAt = 0;
  /** Per configuration: the version the workers should serve, since when, and whether all of them have applied it. */
  readonly #apply: ApplyTracking;
  /** Not-after (ms) of certificates by PEM, for the expiry gauge (only those in use are kept). */
  #notAfter = new Map<string, number>();
  /** Sources still sending while blocked, dropped by the kernel (kernel-blocking/). */
  readonly #kernelBlocking: KernelBlocking;

  constructor(options: EdgeOptions) {
    this.#options = options;
    this.#resolver = new ConfigResolver(options.store, options.secrets, options.crls);
    const workers = options.workers ?? Math.max(1, os.availableParallelism());
    this.#workers = new EdgeWorkers({
      count: workers,
      startThread: options.startThread ?? newWorker,
      logger: options.logger,
      settingsFor: (index) => this.#workerSettings(index),
      onMessage: (slot, message) => this.#onMessage(slot, message),
      // Its connections died with it; their places go back before a new worker takes the slot.
      onExit: (slot) => {
        if (this.#connectionBudget !== undefined) NodeConnectionBudget.reclaim(this.#connectionBudget, slot.index);
      },
      onChange: () => {
        this.#workersChangedAt = Date.now();
      },
    });
    this.#counterTables = new ProxyCounterTableSet({
      floodSlots: FLOOD_SLOTS_PER_PROXY,
      ...(options.rateLimitClientsPerProxy !== undefined && { rateSlots: options.rateLimitClientsPerProxy }),
    });
    const budget = options.maxConnections === undefined ? undefined : NodeConnectionBudget.allocate(options.maxConnections, workers);
    this.#connectionBudget = budget;
    if (budget !== undefined) {
      new Gauge({
        name: 'tps_edge_node_connections',
        help: 'Client connections (HTTP and layer 4 TCP) and layer 4 UDP sessions the edge workers of this node hold now, counted against TPS_EDGE_MAX_CONNECTIONS.',
        registers: [options.metrics.registry],
        collect() {
          this.set(NodeConnectionBudget.read(budget).open);
        },
      });
      new Gauge({
        name: 'tps_edge_node_connection_budget',
        help: 'TPS_EDGE_MAX_CONNECTIONS: past it new edge connections are refused at accept, and datagrams that would open a UDP session dropped (tps_edge_refused_total{reason="NODE_BUDGET"}).',
        registers: [options.metrics.registry],
        collect() {
          this.set(NodeConnectionBudget.read(budget).limit);
        },
      });
    }
    if ((options.threatFeeds ?? []).length > 0) {
      this.#threatFeed = new ThreatFeedHost({
        sources: options.threatFeeds ?? [],
        refreshIntervalMs: options.threatFeedRefreshMs ?? 3_600_000,
        logger: options.logger,
        startThread: options.startThread ?? newWorker,
        // Shared memory: every worker looks up in the same set, nothing is copied.
        onSet: ({ set, generation }) => {
          this.#workers.postAll({ kind: 'threat-feed', set, generation });
        },
      });
    }
    this.#counters = new Map(
      (Object.keys(EDGE_COUNTERS) as EdgeCounterName[]).map((name) => [
        name,
        new Counter({
          name,
          help: EDGE_COUNTERS[name].help,
          labelNames: [...EDGE_COUNTERS[name].labelNames],
          registers: [options.metrics.registry],
        }),
      ]),
    );
    this.#histograms = new Map(
      (Object.keys(EDGE_HISTOGRAMS) as EdgeHistogramName[]).map((name) => [name, new MergedHistogram(name, options.metrics.registry)]),
    );
    this.#insight = new InsightIngest({
      writes: options.insightWrites ?? directInsightWrites(options.store.insightEvents),
      wholePerWindow: options.insightWholeEventsPerMinute ?? 10,
      registry: options.metrics.registry,
      count: (name, requests) => this.#counters.get(name)?.inc(requests),
      logger: options.logger,
      ...(options.eventSinks && { onStored: (events: readonly InsightEvent[]) => options.eventSinks?.ship(events) }),
    });
    const registers = [options.metrics.registry];
    this.#kernelBlocking = new KernelBlocking({
      mode: options.kernelBlocking?.mode ?? 'off',
      escalationFactor: options.kernelBlocking?.escalationFactor ?? DEFAULT_ESCALATION_FACTOR,
      logger: options.logger,
      registry: options.metrics.registry,
    });
    this.#apply = new ApplyTracking({
      registry: options.metrics.registry,
      appliedByAll: (id, version) =>
        this.#workers.slots.every((slot) => slot.worker !== undefined && slot.reports.get(id)?.version === version),
      pollMs: POLL_MS,
    });
    const certificates = () => this.#certificateExpiry();
    new Gauge({
      name: 'tps_edge_certificate_expiry_timestamp_seconds',
      help: "Not-after time (Unix seconds) of the certificates this node's proxies present: front-end certificates (use=frontend) and client certificates to origins (use=origin).",
      labelNames: ['proxy', 'certificate', 'use'],
      registers,
      collect() {
        this.reset();
        for (const certificate of certificates())
          this.set({ proxy: certificate.proxy, certificate: certificate.certificate, use: certificate.use }, certificate.notAfter / 1000);
      },
    });
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
    // Before the workers: they report refusals only when kernel blocking is on.
    await this.#kernelBlocking.start();
    this.#threatFeed?.start();
    this.#workers.start();
    this.#timers.push(
      setInterval(() => void this.#poll(), POLL_MS),
      setInterval(() => void this.#heartbeat(), HEARTBEAT_MS),
      setInterval(() => void this.#insight.flush(), INSIGHT_FLUSH_MS),
    );
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    for (const timer of this.#timers) clearInterval(timer);
    await this.#threatFeed?.stop();
    await this.#workers.stop();
    await this.#kernelBlocking.stop();
    await this.#insight.drain();
    await this.#options.eventSinks?.close();
    await this.#reportQueue;
    await this.#options.store.edgeStatus.leave(this.#options.nodeId).catch(() => {});
  }

  /**
   * Resolves once every worker has applied the current snapshot (each configuration served or
   * reported failing), or after `timeoutMs`. `tps serve` starts the ACME service after this: an
   * order resumed at start must not ask the CA to validate before port 80 listens again.
   */
  async whenApplied(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    const applied = () =>
      this.#entries.every((entry) =>
        this.#workers.slots.every((slot) => slot.worker !== undefined && slot.reports.get(entry.config.id)?.version === entry.version),
      );
    while (!applied()) {
      if (Date.now() > deadline || this.#stopping) return false;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return true;
  }

  /** How many workers serve the current version of a configuration. */
  servingWorkers(configId: string): number {
    const entry = this.#entries.find((candidate) => candidate.config.id === configId);
    if (!entry) return 0;
    return this.#workers.slots.filter((slot) => {
      const report = slot.reports.get(configId);
      return slot.worker && report?.version === entry.version && report.state === 'ACTIVE';
    }).length;
  }

  /** How many workers look up in the node's current threat-feed set (all of them, once it has reached them). */
  threatFeedWorkers(): number {
    const generation = this.#threatFeed?.current?.generation;
    return this.#workers.slots.filter((slot) => slot.worker && generation !== undefined && slot.threatFeedGeneration === generation).length;
  }

  /** The settings of the worker started in slot `index`. */
  #workerSettings(index: number): WorkerSettings {
    const o = this.#options;
    return {
      index,
      logLevel: o.logLevel ?? 'info',
      nodeId: o.nodeId,
      ipv6SourcePrefix: o.ipv6SourcePrefix ?? 64,
      httpConnectionLimits: o.httpConnectionLimits ?? {
        maxConnectionsPerSource: 256,
        maxNewConnectionsPerSecondPerSource: 100,
        maxConnections: 10_000,
      },
      udpReplyBudgetFactor: o.udpReplyBudgetFactor ?? 3,
      connectionBudget: this.#connectionBudget,
      udpMaxUnconfirmedSessions: o.udpMaxUnconfirmedSessions ?? 1000,
      rateLimitClientsPerProxy: o.rateLimitClientsPerProxy ?? 16_384,
      location: o.location,
      threatFeed: this.#threatFeed?.current,
      geoOverridesPath: o.geoOverridesPath,
      geoMmdbPath: o.geoMmdbPath,
      wafAuditLogPath: o.wafAuditLogPath,
      wafThreads: o.wafThreads ?? 1,
      wafQueueLength: o.wafQueueLength ?? DEFAULT_QUEUE_PER_WORKER,
      wafExpensiveClientPercent: o.wafExpensiveClientPercent ?? DEFAULT_EXPENSIVE_CLIENT_SHARE * 100,
      wafBudgetOffenders: o.wafBudgetOffenders ?? DEFAULT_BUDGET_OFFENDERS,
      wafExchangeTtlMs: o.wafExchangeTtlMs ?? 120_000,
      wafEngine: o.wafEngine ?? 'compiled',
      wafBodyLimits: o.wafBodyLimits ?? { request: 128 * 1024, multipart: 1024 * 1024, response: 64 * 1024, action: 'REJECT' },
      wafRequestBudgetMs: o.wafRequestBudgetMs ?? DEFAULT_REQUEST_BUDGET_MS,
      wafInputLimits: o.wafInputLimits ?? {},
      redisUrl: o.redisUrl,
      rateLimitStore: o.rateLimitStore ?? { failureMode: 'local', timeoutMs: 250 },
      clientAddress: o.clientAddress ?? { trustedProxies: [], listenerProxyProtocol: 'off' },
      origins: o.origins,
      insightWholeEventsPerMinute: o.insightWholeEventsPerMinute ?? 10,
      accessLog: o.accessLog,
      kernelBlocking: this.#kernelBlocking.active,
      earlyRefusalEngine: o.earlyRefusalEngine ?? 'auto',
      http1FrontEnd: o.http1FrontEnd ?? 'handles',
      // Signs challenges and clearance cookies: the same on every node that shares the master key.
      appDdos: { settings: o.appDdos ?? {}, secret: o.secrets.derive('app-ddos clearance') },
    };
  }

  #onMessage(slot: WorkerSlot, message: FromWorker): void {
    switch (message.kind) {
      case 'ready':
        slot.worker?.postMessage({ kind: 'apply', entries: this.#entries } satisfies ToWorker);
        break;
      case 'status':
        slot.reports.set(message.id, { version: message.version, state: message.state, detail: message.detail });
        this.#publish(message.id);
        this.#apply.noteApplied(message.id);
        break;
      case 'removed':
        slot.reports.delete(message.id);
        break;
      case 'insight':
        this.#insight.admit(message.event);
        break;
      case 'insight-update':
        this.#insight.updateEpisode(message.eventId, this.#combineEpisodeCounts(slot.index, message.eventId, message.update));
        break;
      case 'acme-lookup': {
        const lookup = this.#options.acmeChallenge ?? (async () => undefined);
        void lookup(message.token, message.host, message.tenantId)
          .catch(() => undefined)
          .then((keyAuthorization) =>
            slot.worker?.postMessage({ kind: 'acme-answer', requestId: message.requestId, keyAuthorization } satisfies ToWorker),
          );
        break;
      }
      case 'acme-alpn-lookup': {
        const lookup = this.#options.acmeTlsAlpn ?? (async () => undefined);
        void lookup(message.servername, message.tenantId)
          .catch(() => undefined)
          .then((certificate) =>
            slot.worker?.postMessage({ kind: 'acme-alpn-answer', requestId: message.requestId, certificate } satisfies ToWorker),
          );
        break;
      }
      case 'counters':
        for (const increment of message.counters) this.#counters.get(increment.name)?.inc(increment.labels, increment.value);
        for (const increment of message.histograms) this.#histograms.get(increment.name)?.add(increment);
        break;
      case 'threat-feed-applied':
        slot.threatFeedGeneration = message.generation;
        break;
      case 'refusals': {
        const escalated = this.#kernelBlocking.onRefusals(message.refusals, (id) => this.#blockTarget(id));
        if (escalated.length === 0) break;
        // Once the kernel drops them (not before: a client reset earlier would just connect again).
        void this.#kernelBlocking.settled().then(() => {
          for (const { proxyId, source } of escalated) this.#workers.postAll({ kind: 'kernel-blocked', proxyId, source });
        });
        break;
      }
      case 'rate-limit-store':
        if (message.failing) slot.rateLimitStoreFailing = message.cause;
        else delete slot.rateLimitStoreFailing;
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
    const unresolved = new Map<string, Published & { detail: string }>();
    const { served, refused } = arbitrateBindings(records);
    for (const [id, detail] of refused) {
      const record = records.find((candidate) => candidate.id === id)!;
      revisions.set(id, record.revision);
      unresolved.set(id, { revision: record.revision, state: 'ERROR', detail });
      if (!this.#bindingRefused.has(id)) {
        this.#options.logger.warn(
          { configId: id, tenantId: record.tenantId, detail },
          'edge refuses a configuration: its front-end binding is served by another',
        );
      }
    }
    this.#bindingRefused = new Set(refused.keys());
    for (const record of served) {
      revisions.set(record.id, record.revision);
      try {
        const resolved = await this.#resolver.resolve(record);
        if ('unresolved' in resolved)
          unresolved.set(record.id, { revision: record.revision, state: resolved.state, detail: resolved.unresolved });
        else
          entries.push({
            ...resolved,
            counters: this.#counterTables.tablesFor(record.id, ratePeriodsMs(resolved.config), appDdosOn(resolved.config)),
          });
      } catch (error) {
        unresolved.set(record.id, { revision: record.revision, state: 'ERROR', detail: `cannot be prepared: ${(error as Error).message}` });
      }
    }
    this.#storeRevision = revision;
    this.#entries = entries;
    this.#revisions = revisions;
    this.#apply.track(entries, records);
    this.#counterTables.retainOnly(new Set(entries.map((entry) => entry.config.id)));
    this.#workers.postAll({ kind: 'apply', entries });
    for (const [id, status] of unresolved) this.#report(id, status);
    for (const id of this.#published.keys()) {
      if (revisions.has(id)) continue;
      this.#published.delete(id);
      this.#enqueueReport(() => store.edgeStatus.forget(this.#options.nodeId, id));
    }
    this.#options.metrics.edgeConfigs.reset();
    for (const record of records) {
      const state = refused.has(record.id) ? 'BINDING_REFUSED' : (unresolved.get(record.id)?.state ?? 'LOADED');
      this.#options.metrics.edgeConfigs.inc({ type: record.type, state });
    }
  }

  /** Combines the workers' reports on one configuration into this node's status for it. */
  #publish(id: string): void {
    const entry = this.#entries.find((candidate) => candidate.config.id === id);
    const revision = this.#revisions.get(id);
    if (!entry || revision === undefined) return;
    const reports = this.#workers.slots.map((slot) => slot.reports.get(id));
    const current = reports.filter((report) => report?.version === entry.version);
    const failure = current.find((report) => report?.state === 'ERROR');
    if (failure) this.#report(id, { revision, state: 'ERROR', detail: failure.detail });
    else if (current.length === this.#workers.slots.length) {
      // Served everywhere. While that is the interim configuration, or while part of it fails
      // closed (ConfigEntry.degraded), the status says so and why.
      if (entry.interim) this.#report(id, { revision, ...entry.interim });
      else if (entry.degraded) this.#report(id, { revision, state: 'ERROR', detail: entry.degraded });
      else this.#report(id, { revision, state: 'ACTIVE', detail: this.#activeNotice(entry) });
    }
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

  /**
   * What `/healthz` says about the edge, from memory (no store access): every configuration the
   * workers were handed is served by all of them, or which are not and why; and warnings.
   */
  health(now = Date.now()): EdgeHealth {
    return edgeHealth(
      {
        entries: this.#entries,
        workerReports: this.#workers.slots.map((slot) => (slot.worker === undefined ? undefined : slot.reports)),
        applyingSince: (id) => Math.max(this.#apply.since(id) ?? now, this.#workersChangedAt),
        withoutFeed: this.#entries.filter((entry) => this.#activeNotice(entry) !== null).map((entry) => entry.config.id),
        threatFeed: this.#threatFeed && { report: this.#threatFeed.report },
        kernelWarning: this.#kernelBlocking.warning,
        rateLimitStore: {
          failureMode: this.#options.rateLimitStore?.failureMode ?? 'local',
          failing: this.#workers.slots.flatMap((slot) =>
            slot.worker !== undefined && slot.rateLimitStoreFailing !== undefined ? [slot.rateLimitStoreFailing] : [],
          ),
        },
      },
      now,
    );
  }

  /** Where a proxy's escalated sources are dropped: its front end, protocols and rate limit. */
  #blockTarget(id: string): BlockTarget | undefined {
    const config = this.#entries.find((entry) => entry.config.id === id)?.config;
    if (config === undefined) return undefined;
    const { ipv4, ipv6, port } = config.attributes.frontend;
    if (config.type === 'httpProxy')
      return { ipv4, ipv6, port, protocols: ['tcp'], thresholds: config.attributes.rateLimiting?.thresholds ?? [] };
    const protocols = (config.attributes.protocols ?? ['TCP']).map((protocol) =>
      protocol === 'UDP' ? ('udp' as const) : ('tcp' as const),
    );
    return { ipv4, ipv6, port, protocols, thresholds: [] };
  }

  /** Resolves once the escalations so far are in the kernel's sets (tests). */
  async kernelBlockingSettled(): Promise<void> {
    await this.#kernelBlocking.settled();
  }

  /** A configuration served as asked but not as the tenant may think: the status detail of an ACTIVE configuration. */
  #activeNotice(entry: ConfigEntry): string | null {
    const config = entry.config;
    if (config.type !== 'l4Proxy' || this.#threatFeed !== undefined) return null;
    return config.attributes.threatIntelligence?.enabled === false ? null : NO_THREAT_FEED_DETAIL;
  }

  /** The certificates this node's proxies present, with their not-after times (parsed once per PEM). */
  #certificateExpiry(): { proxy: string; certificate: string; use: 'frontend' | 'origin'; notAfter: number }[] {
    const found: { proxy: string; certificate: string; use: 'frontend' | 'origin'; notAfter: number }[] = [];
    const seen = new Map<string, number>();
    const add = (proxy: string, certificate: string | null | undefined, use: 'frontend' | 'origin', pem: string | undefined) => {
      if (certificate === undefined || certificate === null || pem === undefined) return;
      let notAfter = this.#notAfter.get(pem) ?? seen.get(pem);
      if (notAfter === undefined) {
        try {
          notAfter = Date.parse(new X509Certificate(pem).validTo);
        } catch {
          return;
        }
      }
      seen.set(pem, notAfter);
      found.push({ proxy, certificate, use, notAfter });
    };
    for (const entry of this.#entries) {
      const config = entry.config;
      if (config.type !== 'httpProxy') continue;
      add(config.id, config.attributes.frontend.certificateId, 'frontend', config.frontendCertificate?.certificatePem);
      add(config.id, config.attributes.backend.tlsSettings?.clientCertificateId, 'origin', config.originClientCertificate?.certificatePem);
    }
    this.#notAfter = seen;
    return found;
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
      lastBlockedAt: all
        .map((counts) => counts.lastBlockedAt)
        .sort()
        .at(-1)!,
      blockedUntil: all
        .map((counts) => counts.blockedUntil)
        .sort()
        .at(-1)!,
    };
  }
}

/** The periods (ms) of an HTTP proxy's rate-limit thresholds, in order; undefined without rate limiting. */
function appDdosOn(config: ConfigEntry['config']): boolean {
  if (config.type !== 'httpProxy') return false;
  const appDdos = config.attributes.appDdos;
  return appDdos !== undefined && appDdos !== null && appDdos.mode !== 'OFF';
}

function ratePeriodsMs(config: ConfigEntry['config']): number[] | undefined {
  if (config.type !== 'httpProxy') return undefined;
  return config.attributes.rateLimiting?.thresholds.map((threshold) => threshold.periodSeconds * 1000);
}
