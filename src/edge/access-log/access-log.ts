/**
 * An edge worker's access log (TPS_ACCESS_LOG): one JSON line per HTTP request and per layer 4
 * connection, written off the serving loop (line-writer.ts: buffered, bounded, drops counted). A
 * request's line is formatted in place (http-line.ts); a connection's, rarer, is `JSON.stringify`.
 *
 * Sampling (TPS_ACCESS_LOG_SAMPLE = N), as HAProxy's `log ... sample 1:N` applied to what its
 * `option dontlog-normal` calls normal traffic: requests the origin answered with 1xx-3xx, and
 * layer 4 connections that reached an origin and ended normally, are written one in N (chosen at
 * random, each written line carrying `"sample": N`). Everything else is always written: whatever
 * the proxy refused or answered itself (WAF, rate limit, geo fencing, caps, threat feed), origin
 * errors and 4xx/5xx answers, connections that failed. Those are what an operator looks for.
 */
import type { AccessLogEntry } from './types.ts';
import type { L4AccessLogEntry } from '../l4/types.ts';
import { appendHttpLine } from './http-line.ts';
import { LineWriter, type LineWriterOptions } from '../../io/line-writer.ts';

/**
 * Request lines are formatted a batch at a time, at the end of the event loop's turn or every this
 * many: formatting in a run keeps the formatter's code and memory in the CPU's caches, where a line
 * formatted between two requests finds them cold (docs/benchmarks.md, Access log); and a batch this
 * small is gone before the garbage collector would have to move it.
 */
const FORMAT_BATCH = 64;

export interface AccessLogSettings {
  /** `stdout` or a file path. */
  destination: string;
  /** Normal requests and connections written one in this many (1: all). */
  sample: number;
}

/** Lines by what became of them, since the log was opened. */
export interface AccessLogCounts {
  written: number;
  /** The buffer was full (the disk could not keep up), or the write failed. */
  dropped: number;
  /** Left out by sampling. */
  sampled: number;
}

export class AccessLog {
  readonly #writer: LineWriter;
  readonly #sample: number;
  #sampled = 0;
  /** Requests whose lines are formatted together, once the loop's turn is over (see FORMAT_BATCH). */
  #waiting: AccessLogEntry[] = [];

  constructor(settings: AccessLogSettings, options: LineWriterOptions = {}) {
    this.#writer = new LineWriter(settings.destination, options);
    this.#sample = Math.max(1, Math.floor(settings.sample));
  }

  readonly http = (entry: AccessLogEntry): void => {
    const normal = entry.answeredBy === 'origin' && entry.status < 400;
    if (normal && !this.#keep()) return;
    if (normal && this.#sample > 1) entry.sample = this.#sample;
    this.#waiting.push(entry);
    if (this.#waiting.length === 1) setImmediate(this.#formatWaiting);
    else if (this.#waiting.length >= FORMAT_BATCH) this.#formatWaiting();
  };

  readonly l4 = (entry: L4AccessLogEntry): void => {
    const normal = entry.answeredBy === 'origin' && entry.end === 'COMPLETED';
    if (normal && !this.#keep()) return;
    if (normal && this.#sample > 1) entry.sample = this.#sample;
    this.#writer.write(JSON.stringify(entry));
  };

  get counts(): AccessLogCounts {
    return { written: this.#writer.written, dropped: this.#writer.dropped, sampled: this.#sampled };
  }

  flush(): Promise<void> {
    this.#formatWaiting();
    return this.#writer.flush();
  }

  close(): Promise<void> {
    this.#formatWaiting();
    return this.#writer.close();
  }

  readonly #formatWaiting = (): void => {
    const entries = this.#waiting;
    if (entries.length === 0) return;
    this.#waiting = [];
    const writer = this.#writer;
    for (const entry of entries) {
      if (!writer.startLine()) continue;
      try {
        appendHttpLine(writer, entry);
        writer.endLine();
      } catch {
        // An entry the formatter cannot read (a bug): its line is left out, the others are written.
        writer.dropped++;
      }
    }
  };

  #keep(): boolean {
    if (this.#sample === 1 || Math.random() * this.#sample < 1) return true;
    this.#sampled++;
    return false;
  }
}
