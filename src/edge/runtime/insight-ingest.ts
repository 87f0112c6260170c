/**
 * An edge node's insight ingestion, bounded: its workers' events go through the node's sampler
 * (src/insight/sampler.ts: the first events of each group and minute whole, the rest counted into
 * sampled events), wait in a backlog of at most `backlogLimit` events, and go to the store one
 * write at a time, in order (the insight writer thread, src/store/insight-writer.ts). A full
 * backlog (the store slow or away) counts WAF events into sampled events instead of holding them:
 * memory stays bounded and the dashboards' numbers stay whole once the store is back. Rate-limit
 * episode updates change their event in place while it waits, else follow it to the store.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { EdgeCounterName } from './metric-catalogue.ts';
import type { AppDdosAttackEvent, InsightEvent } from '@tps/model';
import { InsightSampler, type SamplerOutcome } from '../../insight/sampler.ts';
import { InsightWriteError, type InsightWrites } from '../../store/insight-writer.ts';
import type { EpisodeUpdate } from '../../store/insight-events.ts';

/** Events per write. */
const WRITE_BATCH = 500;
/** Rate-limit episodes whose counters wait to be written (one entry per episode, the latest counts). */
const EPISODE_UPDATES_LIMIT = 65_536;
const LOG_EVERY_MS = 10_000;

export type EpisodeCounts = EpisodeUpdate['update'];

/** The insight counters the workers report too (metric-catalogue.ts). */
export type InsightCounterName = Extract<EdgeCounterName, `tps_insight_${string}`>;

export interface InsightIngestOptions {
  writes: InsightWrites;
  /** WAF events kept whole per group and minute (TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE). */
  wholePerWindow: number;
  registry: Registry;
  /** Adds to a counter the workers report to as well. */
  count: (name: InsightCounterName, requests: number) => void;
  logger: { error(details: object, message: string): void };
  /** Events waiting for the store at most. Default 10,000. */
  backlogLimit?: number;
  /** How often the node's sampled events go out. Default 10 s. */
  samplePeriodMs?: number;
  /** Groups the node's sampler tracks. Default 10,000. */
  samplerGroups?: number;
  /** Receives the events once they are stored, each once, in order (the event sinks). */
  onStored?: (events: readonly InsightEvent[]) => void;
}

export class InsightIngest {
  readonly #writes: InsightWrites;
  readonly #sampler: InsightSampler;
  readonly #backlogLimit: number;
  readonly #samplePeriodMs: number;
  readonly #count: InsightIngestOptions['count'];
  readonly #logger: InsightIngestOptions['logger'];
  /** Events waiting for the store, oldest first. */
  #backlog: InsightEvent[] = [];
  /** The APP_DDOS_ATTACK events of the backlog by id: an episode update changes them in place. */
  readonly #backlogEpisodes = new Map<string, AppDdosAttackEvent>();
  /** Episode counters for events already handed to the store (written after them, in order). */
  #episodeUpdates = new Map<string, EpisodeCounts>();
  #writing: Promise<boolean> | undefined;
  #lastSampleAt = Date.now();
  #lastLog = 0;
  readonly #metrics: { shed: Counter<string>; writeFailures: Counter<string>; lag: Histogram<string> };
  readonly #onStored: ((events: readonly InsightEvent[]) => void) | undefined;

  constructor(options: InsightIngestOptions) {
    this.#writes = options.writes;
    this.#backlogLimit = options.backlogLimit ?? 10_000;
    this.#samplePeriodMs = options.samplePeriodMs ?? 10_000;
    this.#sampler = new InsightSampler({ wholePerWindow: options.wholePerWindow, maxGroups: options.samplerGroups ?? 10_000 });
    this.#count = options.count;
    this.#logger = options.logger;
    this.#onStored = options.onStored;
    const registers = [options.registry];
    const backlog = () => this.#backlog.length;
    const oldest = () => this.#backlog[0];
    new Gauge({
      name: 'tps_insight_backlog_events',
      help: `Insight events waiting to be written to the store (at most ${this.#backlogLimit}; past it, WAF events are counted into sampled events).`,
      registers,
      collect() {
        this.set(backlog());
      },
    });
    this.#metrics = {
      shed: new Counter({
        name: 'tps_insight_backlog_shed_total',
        help: 'WAF events counted into a sampled event instead of kept whole because the backlog to the store was full.',
        registers,
      }),
      writeFailures: new Counter({
        name: 'tps_insight_write_failures_total',
        help: 'Insight writes to the store that failed (retried).',
        registers,
      }),
      lag: new Histogram({
        name: 'tps_insight_ingest_lag_seconds',
        help: "Insight events, from the request (the event's timestamp) to the event stored; a sampled event waits for its group's sampling period too.",
        buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 300],
        registers,
      }),
    };
    new Gauge({
      name: 'tps_insight_backlog_age_seconds',
      help: 'Age of the oldest insight event waiting to be written to the store (0: none waits).',
      registers,
      collect() {
        const event = oldest();
        this.set(event === undefined ? 0 : Math.max(0, (Date.now() - Date.parse(event.timestamp)) / 1000));
      },
    });
  }

  /** Events waiting for the store. */
  get backlog(): number {
    return this.#backlog.length;
  }

  /** An event from a worker: kept whole (into the backlog) or counted into the node's sample of its group. */
  admit(event: InsightEvent): void {
    const outcome = this.#sampler.admit(event);
    if (outcome === 'whole') {
      this.#enqueue(event);
      return;
    }
    // A worker's sample was counted in the worker already (unless it is lost here).
    const workerSample = event.type === 'WAF_EVENT' && event.requestCount !== undefined;
    if (!workerSample) this.#countSampled(outcome);
    else if (outcome === 'dropped') this.#countSampled(outcome, event.requestCount);
  }

  #countSampled(outcome: SamplerOutcome, requests = 1): void {
    if (outcome === 'counted') this.#count('tps_insight_sampled_requests_total', requests);
    else if (outcome === 'overflow') this.#count('tps_insight_overflow_requests_total', requests);
    else if (outcome === 'dropped') this.#count('tps_insight_dropped_requests_total', requests);
  }

  /**
   * Into the backlog, while it has room. Past it a WAF event is counted into its group's sample
   * (the dashboards' numbers stay whole, memory does not grow); an APP_DDOS_ATTACK event (one per
   * client and episode, bounded by the rate-limit table) may take a second backlog's worth.
   */
  #enqueue(event: InsightEvent, front = false): void {
    const room = event.type === 'WAF_EVENT' ? this.#backlogLimit : 2 * this.#backlogLimit;
    if (this.#backlog.length >= room) {
      if (event.type === 'WAF_EVENT') {
        this.#metrics.shed.inc();
        const outcome = this.#sampler.count(event);
        if (outcome === 'dropped') this.#countSampled(outcome, event.requestCount ?? 1);
      } else {
        this.#countSampled('dropped');
      }
      this.#log({ backlog: this.#backlog.length }, 'insight backlog full: WAF events are counted into sampled events');
      return;
    }
    if (front) this.#backlog.unshift(event);
    else this.#backlog.push(event);
    if (event.type === 'APP_DDOS_ATTACK' && event.action === 'BLOCKED') this.#backlogEpisodes.set(event.id, event);
  }

  /** Writes what waits, one batch at a time (never two writes at once: events keep their order). */
  async flush(final = false): Promise<void> {
    if (this.#writing) return;
    const now = Date.now();
    if (final || now - this.#lastSampleAt >= this.#samplePeriodMs) {
      this.#lastSampleAt = now;
      const room = final ? Number.POSITIVE_INFINITY : this.#backlogLimit - this.#backlog.length;
      for (const sample of this.#sampler.takeSamples(now, Math.max(0, room))) {
        this.#backlog.push(sample);
      }
    }
    if (this.#backlog.length === 0 && this.#episodeUpdates.size === 0) return;
    const batch = this.#backlog.splice(0, WRITE_BATCH);
    for (const event of batch) if (event.type === 'APP_DDOS_ATTACK') this.#backlogEpisodes.delete(event.id);
    const updates: EpisodeUpdate[] = [...this.#episodeUpdates].map(([eventId, update]) => ({ eventId, update }));
    this.#episodeUpdates = new Map();
    this.#writing = this.#write(batch, updates);
    let written = false;
    try {
      written = await this.#writing;
    } finally {
      this.#writing = undefined;
    }
    // A flood's backlog goes out batch after batch, not one batch per tick.
    if (written && !final && this.#backlog.length >= WRITE_BATCH) setImmediate(() => void this.flush());
  }

  async #write(batch: InsightEvent[], updates: EpisodeUpdate[]): Promise<boolean> {
    try {
      await this.#writes.write(batch, updates);
      this.#stored(batch);
      return true;
    } catch (error) {
      this.#metrics.writeFailures.inc();
      // Back to the front, in order; what no longer fits is counted into sampled events.
      const written = error instanceof InsightWriteError ? error.written : 0;
      if (written > 0) this.#stored(batch.slice(0, written));
      const unwritten = batch.slice(written);
      for (let index = unwritten.length - 1; index >= 0; index--) this.#enqueue(unwritten[index]!, true);
      // An update is newer than the counts its event was written with, older than one received since.
      for (const { eventId, update } of updates) {
        if (this.#episodeUpdates.has(eventId)) continue;
        const waiting = this.#backlogEpisodes.get(eventId);
        if (waiting) Object.assign(waiting.rateLimit, update);
        else this.#episodeUpdates.set(eventId, update);
      }
      this.#log({ err: error, events: unwritten.length }, 'insight events could not be stored; will retry');
      return false;
    }
  }

  /** Events are in the store: their lag is observed, and they go to the sinks (each event once: a retry sends only the unwritten). */
  #stored(events: readonly InsightEvent[]): void {
    if (events.length === 0) return;
    const now = Date.now();
    for (const event of events) this.#metrics.lag.observe(Math.max(0, (now - Date.parse(event.timestamp)) / 1000));
    try {
      this.#onStored?.(events);
    } catch (error) {
      this.#log({ err: error }, 'insight events could not be handed to the event sinks');
    }
  }

  /** Writes everything that waits (stopping): samples included, until done or the store fails. */
  async drain(): Promise<void> {
    await this.#writing;
    for (let failures = 0; failures < 3; ) {
      const before = this.#backlog.length;
      await this.flush(true);
      if (this.#backlog.length === 0 && this.#episodeUpdates.size === 0) return;
      if (this.#backlog.length >= before) failures++;
    }
  }

  #log(details: object, message: string): void {
    const now = Date.now();
    if (now - this.#lastLog < LOG_EVERY_MS) return;
    this.#lastLog = now;
    this.#logger.error(details, message);
  }

  /** The latest counters of a rate-limit episode (summed over the workers). */
  updateEpisode(eventId: string, update: EpisodeCounts): void {
    const waiting = this.#backlogEpisodes.get(eventId);
    if (waiting) {
      Object.assign(waiting.rateLimit, update);
      this.#episodeUpdates.delete(eventId);
      return;
    }
    // Handed to the store already (or being written): the update follows it in the next write.
    if (this.#episodeUpdates.size >= EPISODE_UPDATES_LIMIT && !this.#episodeUpdates.has(eventId)) {
      this.#log({ eventId }, 'too many rate-limit episode updates waiting for the store: this one is not written');
      return;
    }
    this.#episodeUpdates.set(eventId, update);
  }
}
