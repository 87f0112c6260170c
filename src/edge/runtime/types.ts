/** The types the edge runtime's modules (supervisor, threat-feed host) share with their callers. Types only. */
import type { Worker, WorkerOptions } from 'node:worker_threads';

/**
 * Starts a thread of the runtime (a proxy worker, the threat-feed thread): `new Worker` in the
 * product; a test passes one that keeps the threads, to end one as a crash would.
 */
export type StartThread = (script: URL, options: WorkerOptions) => Worker;

/** Where the supervisor and its helpers log (pino's signature fits). */
export interface EdgeLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}
