/**
 * What a pool thread is running, shared with the pool (two Int32 slots in a SharedArrayBuffer):
 * how many requests it has started, and whether one is running now. The pool's watchdog sees a
 * request as running away when the same one has been running for longer than the budget; time
 * spent queued behind other requests does not count.
 */
export class RunWatch {
  static readonly BYTES = 8;
  private readonly slots: Int32Array;
  constructor(buffer: SharedArrayBuffer) {
    this.slots = new Int32Array(buffer);
  }
  begin(): void {
    Atomics.add(this.slots, 0, 1);
    Atomics.store(this.slots, 1, 1);
  }
  end(): void {
    Atomics.store(this.slots, 1, 0);
  }
  /** The number of the request running now, or -1 when none is. */
  running(): number {
    return Atomics.load(this.slots, 1) === 1 ? Atomics.load(this.slots, 0) : -1;
  }
}
