/**
 * The edge node's threat feed, read and built once per node in a thread of its own
 * (threat-feed-thread.ts), for every proxy worker to look up in.
 *
 * Why a thread: building a 500,000-entry set blocks a loop for most of a second. In a proxy worker
 * that stalls every connection it serves (and all workers refreshed on the same timer); in the
 * supervisor's thread it would hold up the store polling (every 200 ms), status reports, the
 * workers' ACME look-ups and, in `tps serve`, the API, which shares that thread. The feed thread
 * does nothing else, so its pauses delay no one. It lives as long as the node (sources, HTTP
 * validators and last good entries are its state, and it refreshes on its timer); a node without
 * feed sources does not start it.
 *
 * Each set it builds lives in SharedArrayBuffers and reaches the host as a `SharedIpSet` (the
 * buffers are shared, not copied). The host keeps the latest with a generation number and calls
 * `onSet`, which the supervisor uses to post it to every worker; a worker started later gets
 * `current` in its workerData. A thread that dies is started again; the sets already given out
 * stay in use until its first refresh gives a new one.
 */
import { Worker } from 'node:worker_threads';
import type { SharedIpSet } from '../../net/ip-set.ts';
import { sourceLabel, type ThreatFeedReport } from '../l4/threat-feed.ts';
import type { EdgeLogger, StartThread } from './types.ts';

const RESTART_DELAY_MS = 1_000;

export interface ThreatFeedThreadSettings {
  sources: string[];
  refreshIntervalMs: number;
}

export type FromThreatFeedThread = {
  kind: 'report';
  report: ThreatFeedReport;
  /** The set now in use, when this refresh built a new one. */
  set: SharedIpSet | undefined;
};

/** A built set as the supervisor hands it to workers: generations only grow, across thread restarts too. */
export interface ThreatFeedSet {
  set: SharedIpSet;
  generation: number;
}

export interface ThreatFeedHostOptions extends ThreatFeedThreadSettings {
  logger: EdgeLogger;
  onSet: (current: ThreatFeedSet) => void;
  /** Starts the feed thread; default `new Worker`. */
  startThread?: StartThread;
}

export class ThreatFeedHost {
  readonly #options: ThreatFeedHostOptions;
  #thread: Worker | undefined;
  #current: ThreatFeedSet | undefined;
  #report: ThreatFeedReport | undefined;
  #generation = 0;
  #stopping = false;

  constructor(options: ThreatFeedHostOptions) {
    this.#options = options;
  }

  /** The set in use, once the thread has built one. */
  get current(): ThreatFeedSet | undefined {
    return this.#current;
  }

  /** What the last refresh reported (each source's state, the set's size). */
  get report(): ThreatFeedReport | undefined {
    return this.#report;
  }

  start(): void {
    this.#stopping = false;
    this.#spawn();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    const thread = this.#thread;
    this.#thread = undefined;
    // Nothing to flush: the feed's state is rebuilt from its sources at the next start.
    if (thread) await thread.terminate();
  }

  #spawn(): void {
    const { logger, sources, refreshIntervalMs } = this.#options;
    const settings: ThreatFeedThreadSettings = { sources, refreshIntervalMs };
    const start = this.#options.startThread ?? ((script, options) => new Worker(script, options));
    const thread = start(new URL('./threat-feed-thread.ts', import.meta.url), { workerData: settings, name: 'tps-threat-feed' });
    this.#thread = thread;
    thread.on('message', (message: FromThreatFeedThread) => this.#onReport(message));
    thread.on('error', (error) => logger.error({ err: error }, 'threat feed thread failed'));
    thread.on('exit', (code) => {
      if (this.#thread !== thread) return;
      this.#thread = undefined;
      if (this.#stopping) return;
      logger.warn({ code }, 'threat feed thread exited; starting it again (the set in use stays)');
      setTimeout(() => {
        if (!this.#stopping && this.#thread === undefined) this.#spawn();
      }, RESTART_DELAY_MS).unref();
    });
  }

  #onReport({ report, set }: FromThreatFeedThread): void {
    const { logger, onSet } = this.#options;
    this.#report = report;
    for (const source of report.sources) {
      if (!source.ok)
        logger.warn(
          { source: sourceLabel(source.source), error: source.error, entries: source.entries },
          'threat feed source could not be read; its last good entries stay',
        );
    }
    if (set === undefined) return;
    this.#current = { set, generation: ++this.#generation };
    logger.info(
      {
        size: report.size,
        generation: this.#generation,
        sources: report.sources.map((source) => ({ source: sourceLabel(source.source), entries: source.entries })),
      },
      'threat feed set built',
    );
    onSet(this.#current);
  }
}
