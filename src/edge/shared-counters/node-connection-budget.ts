/**
 * The node-wide budget of edge connections (TPS_EDGE_MAX_CONNECTIONS): client connections of every
 * proxy (HTTP and layer 4 TCP) and layer 4 UDP sessions in every worker of the node, counted in one
 * word of shared memory. The supervisor allocates it and hands the same buffer to every worker
 * (workerData); a worker takes a place at accept (a UDP session: with its first datagram) and gives
 * it back when the connection closes (the session ends).
 *
 * Layout (Int32 words): [0] the budget, [1] connections open in the node, [2 + i] those of worker
 * i. A worker that dies takes its connections with it, and never gives their places back itself:
 * the supervisor returns them (`reclaim`) before it starts the worker again.
 */

/** What a proxy needs of the budget: a place per connection, taken at accept, given back at close. */
export interface ConnectionBudget {
  /** Takes a place; false: the node holds its budget of connections already (the connection is refused). */
  tryAcquire(): boolean;
  /** Gives back a place taken by `tryAcquire`, exactly once. */
  release(): void;
}

const LIMIT = 0;
const OPEN = 1;
const FIRST_WORKER = 2;

export class NodeConnectionBudget implements ConnectionBudget {
  readonly #words: Int32Array;
  readonly #slot: number;

  /** Shared memory for a budget of `limit` connections across `workers` workers. */
  static allocate(limit: number, workers: number): SharedArrayBuffer {
    const buffer = new SharedArrayBuffer((FIRST_WORKER + workers) * Int32Array.BYTES_PER_ELEMENT);
    new Int32Array(buffer)[LIMIT] = Math.min(limit, 0x7fffffff);
    return buffer;
  }

  /** Gives back every place worker `worker` held: it exited, its connections went with it. */
  static reclaim(buffer: SharedArrayBuffer, worker: number): number {
    const words = new Int32Array(buffer);
    const held = Atomics.exchange(words, FIRST_WORKER + worker, 0);
    Atomics.sub(words, OPEN, held);
    return held;
  }

  /** Connections open in the node and the budget, read from `buffer`. */
  static read(buffer: SharedArrayBuffer): { open: number; limit: number } {
    const words = new Int32Array(buffer);
    return { open: Atomics.load(words, OPEN), limit: Atomics.load(words, LIMIT) };
  }

  /** Worker `worker`'s view of the budget in `buffer`. */
  constructor(buffer: SharedArrayBuffer, worker: number) {
    this.#words = new Int32Array(buffer);
    if (FIRST_WORKER + worker >= this.#words.length) throw new RangeError(`no slot for worker ${worker} in the connection budget`);
    this.#slot = FIRST_WORKER + worker;
  }

  tryAcquire(): boolean {
    // Taken first, then checked: two workers racing for the last place cannot both get it.
    if (Atomics.add(this.#words, OPEN, 1) >= Atomics.load(this.#words, LIMIT)) {
      Atomics.sub(this.#words, OPEN, 1);
      return false;
    }
    Atomics.add(this.#words, this.#slot, 1);
    return true;
  }

  release(): void {
    Atomics.sub(this.#words, this.#slot, 1);
    Atomics.sub(this.#words, OPEN, 1);
  }
}
