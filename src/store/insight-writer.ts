/**
 * Insight ingestion off the serving loop. The events an edge node keeps are written by a thread
 * of their own (insight-writer-thread.ts) with its own connection to the store: node:sqlite is
 * synchronous, so on the main thread every write would stop the API, the portal and the edge's
 * status reports for as long as it takes. The thread also runs the retention work
 * (insight-retention.ts) once a minute and whenever a cap is passed.
 *
 * SQLite (WAL mode): the API's reads never wait for the thread's writes; its writes wait for at
 * most one of the thread's short transactions (at most WRITE_CHUNK events, or one retention chunk).
 */
import { Worker } from 'node:worker_threads';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { InsightEvent } from '@tps/model';
import type { EpisodeUpdate, InsightEventRepository } from './insight-events.ts';
import type { InsightLimits, RetentionReport } from './insight-retention.ts';

/** Where an edge node's insight events go: in order, then the episode updates. */
export interface InsightWrites {
  /** Rejects with an InsightWriteError saying how many of the events were stored before the failure. */
  write(events: readonly InsightEvent[], updates: readonly EpisodeUpdate[]): Promise<void>;
}

export class InsightWriteError extends Error {
  /** The first `written` events are stored; the rest and the updates are not. */
  readonly written: number;
  constructor(message: string, written: number) {
    super(message);
    this.written = written;
  }
}

/** Events (or episode updates) per transaction: a transaction holds SQLite's write lock, which the API's writes wait for. */
export const WRITE_CHUNK = 100;

/** Writes in the calling thread (tests, tools): the same chunks and errors as the writer thread. */
export function directInsightWrites(repository: InsightEventRepository): InsightWrites {
  return { write: (events, updates) => writeInChunks(repository, events, updates) };
}

export async function writeInChunks(
  repository: InsightEventRepository,
  events: readonly InsightEvent[],
  updates: readonly EpisodeUpdate[],
): Promise<void> {
  let written = 0;
  try {
    for (; written < events.length; written += WRITE_CHUNK) {
      await repository.append(events.slice(written, written + WRITE_CHUNK));
    }
    written = events.length;
    // Updates are idempotent (the latest counters): after a failure they are all sent again.
    for (let offset = 0; offset < updates.length; offset += WRITE_CHUNK) {
      await repository.updateEpisodes(updates.slice(offset, offset + WRITE_CHUNK));
    }
  } catch (error) {
    throw new InsightWriteError((error as Error).message, Math.min(written, events.length));
  }
}

export interface InsightWriterOptions {
  dataDir: string;
  databaseUrl: string | undefined;
  /** This node's name: its row of insight_usage. */
  writer: string;
  limits: InsightLimits;
  /** How often the retention work runs. Default one minute. */
  maintenanceIntervalMs?: number;
  /** Prometheus registry for the writer's metrics. */
  registry?: Registry;
  logger?: { error(details: object, message: string): void };
}

export type ToWriterThread =
  | { kind: 'write'; id: number; events: readonly InsightEvent[]; updates: readonly EpisodeUpdate[] }
  | { kind: 'maintain'; id: number; now?: number }
  | { kind: 'close'; id: number };

export type FromWriterThread =
  | { kind: 'ready' }
  | { kind: 'done'; id: number; report?: RetentionReport; expired?: number }
  | { kind: 'failed'; id: number; message: string; written: number }
  | { kind: 'retention'; report: RetentionReport }
  | { kind: 'retention-failed'; message: string };

export interface WriterThreadSettings {
  dataDir: string;
  databaseUrl: string | undefined;
  writer: string;
  limits: InsightLimits;
  maintenanceIntervalMs: number;
}

interface Pending {
  resolve(message: FromWriterThread & { kind: 'done' }): void;
  reject(error: Error): void;
}

/** A writer thread that died (its store unreachable at start, a crash) is started again after this. */
const RESTART_DELAY_MS = 1_000;

export class InsightWriter implements InsightWrites {
  #worker: Worker;
  /** Resolves once the current thread's connection is open (or its start failed). */
  #ready: Promise<void>;
  #up = false;
  readonly #settings: WriterThreadSettings;
  readonly #pending = new Map<number, Pending>();
  #nextId = 0;
  #closed = false;
  readonly #metrics:
    | {
        written: Counter<string>;
        expired: Counter<'reason'>;
        storedBytes: Gauge<string>;
        storedEvents: Gauge<string>;
      }
    | undefined;
  readonly #logger: InsightWriterOptions['logger'];

  private constructor(options: InsightWriterOptions) {
    this.#logger = options.logger;
    this.#settings = {
      dataDir: options.dataDir,
      databaseUrl: options.databaseUrl,
      writer: options.writer,
      limits: options.limits,
      maintenanceIntervalMs: options.maintenanceIntervalMs ?? 60_000,
    };
    const registers = options.registry ? [options.registry] : undefined;
    this.#metrics = registers && {
      written: new Counter({
        name: 'tps_insight_stored_events_total',
        help: 'Insight events written to the store (whole or sampled).',
        registers,
      }),
      expired: new Counter({
        name: 'tps_insight_removed_events_total',
        help: 'Insight events removed by retention: "age" (TPS_INSIGHT_RETENTION_DAYS), "size" (TPS_INSIGHT_MAX_BYTES or a tenant share), "late" (older than the retention when they arrived).',
        labelNames: ['reason'],
        registers,
      }),
      storedBytes: new Gauge({
        name: 'tps_insight_stored_bytes',
        help: 'Estimated bytes the stored insight events hold (all tenants), as of the last retention run.',
        registers,
      }),
      storedEvents: new Gauge({
        name: 'tps_insight_stored_events',
        help: 'Insight events stored (all tenants), as of the last retention run.',
        registers,
      }),
    };
    [this.#worker, this.#ready] = this.#spawn();
  }

  #spawn(): [Worker, Promise<void>] {
    const worker = new Worker(new URL('./insight-writer-thread.ts', import.meta.url), {
      workerData: this.#settings,
      name: 'tps-insight-writer',
    });
    let started: () => void = () => {};
    let failed: (error: Error) => void = () => {};
    const ready = new Promise<void>((resolve, reject) => {
      started = resolve;
      failed = reject;
    });
    ready.catch(() => undefined);
    worker.on('message', (message: FromWriterThread) => {
      if (message.kind === 'ready') {
        this.#up = true;
        started();
      } else {
        this.#onMessage(message);
      }
    });
    worker.on('error', (error) => {
      this.#logger?.error({ err: error }, 'insight writer thread failed');
      failed(error);
    });
    worker.on('exit', () => {
      this.#up = false;
      failed(new Error('the insight writer thread stopped'));
      this.#failAll(new Error('the insight writer thread stopped'));
      if (this.#closed) return;
      setTimeout(() => {
        if (!this.#closed) [this.#worker, this.#ready] = this.#spawn();
      }, RESTART_DELAY_MS).unref();
    });
    return [worker, ready];
  }

  /** Starts the thread; resolves once its connection to the store is open (rejects when it cannot open it). */
  static async start(options: InsightWriterOptions): Promise<InsightWriter> {
    const writer = new InsightWriter(options);
    try {
      await writer.#ready;
    } catch (error) {
      await writer.close();
      throw error;
    }
    return writer;
  }

  async write(events: readonly InsightEvent[], updates: readonly EpisodeUpdate[]): Promise<void> {
    if (events.length === 0 && updates.length === 0) return;
    await this.#call({ kind: 'write', events, updates });
    this.#metrics?.written.inc(events.length);
  }

  /** Runs the retention work now (it also runs by itself). */
  async maintain(now?: number): Promise<RetentionReport> {
    const done = await this.#call({ kind: 'maintain', ...(now !== undefined && { now }) });
    return done.report!;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#up) await this.#call({ kind: 'close' }).catch(() => undefined);
    this.#closed = true;
    await this.#worker.terminate();
  }

  #call(
    message:
      | { kind: 'write'; events: readonly InsightEvent[]; updates: readonly EpisodeUpdate[] }
      | { kind: 'maintain'; now?: number }
      | { kind: 'close' },
  ) {
    if (this.#closed) return Promise.reject(new InsightWriteError('the insight writer is closed', 0));
    // While the thread is (re)starting, writes fail at once: the edge keeps them in its backlog.
    if (!this.#up) return Promise.reject(new InsightWriteError('the insight writer thread is not running', 0));
    const id = ++this.#nextId;
    return new Promise<FromWriterThread & { kind: 'done' }>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ ...message, id } satisfies ToWriterThread);
    });
  }

  #onMessage(message: FromWriterThread): void {
    switch (message.kind) {
      case 'done': {
        const pending = this.#pending.get(message.id);
        this.#pending.delete(message.id);
        if (message.expired) this.#metrics?.expired.inc({ reason: 'late' }, message.expired);
        if (message.report) this.#recordRetention(message.report);
        pending?.resolve(message);
        break;
      }
      case 'failed': {
        const pending = this.#pending.get(message.id);
        this.#pending.delete(message.id);
        if (message.written) this.#metrics?.written.inc(message.written);
        pending?.reject(new InsightWriteError(message.message, message.written));
        break;
      }
      case 'retention':
        this.#recordRetention(message.report);
        break;
      case 'retention-failed':
        this.#logger?.error({ error: message.message }, 'insight retention failed; it runs again in a minute');
        break;
      case 'ready':
        break;
    }
  }

  #recordRetention(report: RetentionReport): void {
    if (!this.#metrics) return;
    if (report.expired) this.#metrics.expired.inc({ reason: 'age' }, report.expired);
    if (report.evicted) this.#metrics.expired.inc({ reason: 'size' }, report.evicted);
    this.#metrics.storedBytes.set(report.storedBytes);
    this.#metrics.storedEvents.set(report.storedEvents);
  }

  #failAll(error: Error): void {
    for (const pending of this.#pending.values()) pending.reject(new InsightWriteError(error.message, 0));
    this.#pending.clear();
  }
}
