/**
 * What a pool thread is running, shared with the pool (two Int32 slots in a SharedArrayBuffer):
 * the id of the call it started last (the pool's message id), and whether it is running now. The
 * pool's watchdog sees a call as running away when the same one has been running for longer than
 * the budget (time spent queued behind other requests does not count), and knows which call it is.
 */
export class RunWatch {
  static readonly BYTES = 8;
  private readonly slots: Int32Array;
  constructor(buffer: SharedArrayBuffer) {
    this.slots = new Int32Array(buffer);
  }
  begin(id: number): void {
    Atomics.store(this.slots, 0, id);
    Atomics.store(this.slots, 1, 1);
  }
  end(): void {
    Atomics.store(this.slots, 1, 0);
  }
  /** The id of the call running now, or -1 when none is. */
  running(): number {
    return Atomics.load(this.slots, 1) === 1 ? Atomics.load(this.slots, 0) : -1;
  }
}
