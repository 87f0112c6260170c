/**
 * At most `concurrency` tasks at once, at most `maxWaiting` more waiting their turn; past that a
 * task is refused at once (`GateFullError`) rather than queued without end.
 *
 * It bounds the portal's password hashes: scrypt (128 MiB each) runs on libuv's thread pool, which
 * the whole process shares (4 threads by default) with DNS look-ups of origin names, file reads and
 * zlib. A burst of sign-ins must not take every thread of it, nor pile up 128 MiB buffers.
 */
export class GateFullError extends Error {
  constructor() {
    super('too many tasks waiting');
  }
}

export class ConcurrencyGate {
  readonly concurrency: number;
  readonly maxWaiting: number;
  #running = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(concurrency: number, maxWaiting: number) {
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error('concurrency must be a positive integer');
    this.concurrency = concurrency;
    this.maxWaiting = Math.max(0, maxWaiting);
  }

  /** Tasks running now. */
  get running(): number {
    return this.#running;
  }

  /** Tasks waiting for a turn now. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Runs `task` when a turn is free; rejects with GateFullError at once when the queue is full. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#running >= this.concurrency) {
      if (this.#waiting.length >= this.maxWaiting) throw new GateFullError();
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
    } else {
      this.#running++;
    }
    try {
      return await task();
    } finally {
      const next = this.#waiting.shift();
      // The turn passes straight to the next task: `running` stays as it is.
      if (next !== undefined) next();
      else this.#running--;
    }
  }
}
