/**
 * The edge's proxy worker threads: one slot per worker, each started with its settings, started
 * again (after a short delay) when its thread exits unasked, and stopped together. A slot keeps what
 * its worker reported last; the supervisor reads the slots (health, apply tracking, status) and
 * handles the workers' messages.
 */
import type { Worker } from 'node:worker_threads';
import type { WorkerReport } from './health.ts';
import type { FromWorker, ToWorker } from './messages.ts';
import type { EdgeLogger, StartThread } from './types.ts';
import type { WorkerSettings } from './worker.ts';

/** A worker that exited unasked is started again after this long (a crash loop stays slow). */
const RESTART_DELAY_MS = 200;
/** A worker asked to stop that has not exited after this long is terminated. */
const STOP_TIMEOUT_MS = 5_000;

export interface WorkerSlot {
  readonly index: number;
  worker: Worker | undefined;
  /** What this worker reported last, per configuration id. */
  readonly reports: Map<string, WorkerReport>;
  /** Generation of the threat-feed set this worker says it uses. */
  threatFeedGeneration?: number;
  /** Set while this worker's rate-limit counters in Redis do not answer: why. */
  rateLimitStoreFailing?: string;
}

export interface EdgeWorkersOptions {
  count: number;
  startThread: StartThread;
  logger: EdgeLogger;
  /** The settings of the worker started in a slot (read at each start: the current threat feed...). */
  settingsFor: (index: number) => WorkerSettings;
  onMessage: (slot: WorkerSlot, message: FromWorker) => void;
  /** A worker's thread is gone (its slot is empty until it is started again). */
  onExit: (slot: WorkerSlot) => void;
  /** A worker started or exited: its configurations get the grace again. */
  onChange: () => void;
}

export class EdgeWorkers {
  readonly slots: readonly WorkerSlot[];
  readonly #options: EdgeWorkersOptions;
  #stopping = false;

  constructor(options: EdgeWorkersOptions) {
    this.#options = options;
    this.slots = Array.from({ length: options.count }, (_, index) => ({ index, worker: undefined, reports: new Map() }));
  }

  start(): void {
    this.#stopping = false;
    for (const slot of this.slots) this.#start(slot);
  }

  /** Asks every worker to stop (their listeners closed, their state flushed); resolves once all exited. */
  async stop(): Promise<void> {
    this.#stopping = true;
    await Promise.all(
      this.slots.map(async (slot) => {
        const worker = slot.worker;
        if (!worker) return;
        const exited = new Promise((resolve) => worker.once('exit', resolve));
        worker.postMessage({ kind: 'stop' } satisfies ToWorker);
        const timeout = setTimeout(() => void worker.terminate(), STOP_TIMEOUT_MS);
        await exited;
        clearTimeout(timeout);
      }),
    );
  }

  /** Sends a message to every running worker. */
  postAll(message: ToWorker): void {
    for (const slot of this.slots) slot.worker?.postMessage(message);
  }

  #start(slot: WorkerSlot): void {
    const o = this.#options;
    const worker = o.startThread(new URL('./worker.ts', import.meta.url), {
      workerData: o.settingsFor(slot.index),
      name: `tps-edge-${slot.index}`,
    });
    slot.worker = worker;
    o.onChange();
    slot.reports.clear();
    delete slot.threatFeedGeneration;
    delete slot.rateLimitStoreFailing;
    worker.on('message', (message: FromWorker) => o.onMessage(slot, message));
    worker.on('error', (error) => o.logger.error({ err: error, worker: slot.index }, 'edge worker failed'));
    worker.on('exit', (code) => {
      if (slot.worker !== worker) return;
      slot.worker = undefined;
      o.onExit(slot);
      o.onChange();
      if (this.#stopping) return;
      o.logger.warn({ worker: slot.index, code }, 'edge worker exited; starting it again');
      setTimeout(() => {
        if (!this.#stopping) this.#start(slot);
      }, RESTART_DELAY_MS).unref();
    });
  }
}
