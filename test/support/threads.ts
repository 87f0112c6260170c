/**
 * A thread starter for the edge runtime (its `startThread` option) that keeps the threads it
 * starts, so that a test can end one as a crash would: the runtime sees the same exit as when a
 * thread dies on its own, and no product class carries a method for it.
 */
import { Worker, type WorkerOptions } from 'node:worker_threads';
import type { StartThread } from '../../src/edge/runtime/types.ts';

export class ThreadKeeper {
  readonly #live = new Map<Worker, string>();

  readonly start: StartThread = (script: URL, options: WorkerOptions) => {
    const worker = new Worker(script, options);
    this.#live.set(worker, options.name ?? '');
    worker.once('exit', () => this.#live.delete(worker));
    return worker;
  };

  /** Ends the live thread named `name` (a proxy worker: `tps-edge-INDEX`); resolves once it is gone. */
  async crash(name: string): Promise<void> {
    const worker = [...this.#live].find(([, n]) => n === name)?.[0];
    if (worker === undefined) throw new Error(`no live thread named ${name}`);
    await worker.terminate();
  }
}
