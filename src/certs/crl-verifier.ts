/**
 * Runs `verifyCrl` in a thread of its own (crl-thread.ts), started with the first CRL and kept.
 *
 * Bounded: the thread has a heap limit (a hostile CRL cannot take the process's memory) and each
 * CRL a time limit; a thread that runs out of either is ended, the CRLs it held fail, and the next
 * CRL starts a new thread. An idle thread does not keep the process alive.
 */
import { Worker } from 'node:worker_threads';
import { CrlError, type CrlProblem, type VerifiedCrl } from './crl-verify.ts';

/** A CRL to check, as posted to the thread (the bytes are moved, not copied). */
export interface CrlJob {
  id: number;
  data: Uint8Array;
  caPem: string;
}

/** `problem`: what verifyCrl found wrong (a CrlError); absent for any other failure. */
export type CrlJobResult = { id: number; crl: VerifiedCrl } | { id: number; error: string; problem: CrlProblem | undefined };

export interface CrlVerifierOptions {
  /** Longest time one CRL may take in the thread. Default 30 s. */
  timeoutMs?: number;
  /** Heap limit of the thread. Default 256 MB. */
  maxHeapMb?: number;
}

interface Pending {
  resolve(crl: VerifiedCrl): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

export class CrlVerifier {
  readonly #timeoutMs: number;
  readonly #maxHeapMb: number;
  readonly #pending = new Map<number, Pending>();
  #worker: Worker | undefined;
  #nextId = 0;

  constructor(options: CrlVerifierOptions = {}) {
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#maxHeapMb = options.maxHeapMb ?? 256;
  }

  /** Parses `data` (DER or PEM) and checks it against `caPem` off this thread; rejects with CrlError when it does not hold. */
  verify(data: Uint8Array, caPem: string): Promise<VerifiedCrl> {
    const worker = (this.#worker ??= this.#start());
    const id = ++this.#nextId;
    // A copy of its own, so that moving it to the thread leaves the caller's buffer (maybe a slice of a pool) alone.
    const bytes = Uint8Array.from(data);
    return new Promise<VerifiedCrl>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#restart(worker, new CrlError(`checking the CRL took longer than ${this.#timeoutMs} ms`));
      }, this.#timeoutMs);
      timer.unref();
      this.#pending.set(id, { resolve, reject, timer });
      worker.ref();
      worker.postMessage({ id, data: bytes, caPem } satisfies CrlJob, [bytes.buffer]);
    });
  }

  /** Ends the thread; CRLs being checked fail. */
  async close(): Promise<void> {
    const worker = this.#worker;
    if (worker === undefined) return;
    this.#fail(new CrlError('the CRL service stopped'));
    this.#worker = undefined;
    await worker.terminate();
  }

  #start(): Worker {
    const worker = new Worker(new URL('./crl-thread.ts', import.meta.url), {
      name: 'tps-crl',
      resourceLimits: { maxOldGenerationSizeMb: this.#maxHeapMb },
    });
    worker.unref();
    worker.on('message', (result: CrlJobResult) => {
      const pending = this.#pending.get(result.id);
      if (pending === undefined) return;
      this.#pending.delete(result.id);
      if (this.#pending.size === 0) worker.unref();
      clearTimeout(pending.timer);
      if ('crl' in result) pending.resolve(result.crl);
      else pending.reject(result.problem !== undefined ? new CrlError(result.error, result.problem) : new Error(result.error));
    });
    worker.on('error', (error) => this.#restart(worker, new CrlError(`the CRL could not be checked (${error.message})`)));
    worker.on('exit', () => this.#restart(worker, new CrlError('the CRL could not be checked (its thread ended)')));
    return worker;
  }

  /** The thread failed or took too long: what it held fails, and the next CRL gets a new thread. */
  #restart(worker: Worker, error: Error): void {
    if (this.#worker !== worker) return;
    this.#worker = undefined;
    this.#fail(error);
    void worker.terminate();
  }

  #fail(error: Error): void {
    for (const pending of this.#pending.values()) {
      clearTimeout(pending.timer);
      pending.reject(error);
    }
    this.#pending.clear();
  }
}
