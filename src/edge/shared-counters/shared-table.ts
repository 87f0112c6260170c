/**
 * Counters shared by every proxy worker of an edge node, so that limits per client hold the same
 * with several worker threads as with one ("both cores used, same behaviour as one").
 *
 * One SharedArrayBuffer, made by the supervisor and handed to each worker, holds a fixed number of
 * slots: memory is bounded whatever a flood does (millions of spoofed sources only recycle slots).
 * A slot is a small header (lock, 64-bit key hash, last use) and a few float64 payload words whose
 * meaning belongs to the caller. Keys are found by linear probing over a short window; when the
 * window is full, the slot used longest ago is taken over (its key loses only its counts).
 *
 * Hand-written rather than a library: it sits on every connection and request, and no maintained
 * package offers a bounded, lock-per-slot table over SharedArrayBuffer.
 */

const HEADER_BYTES = 16; // lock, hash low, hash high, last use (seconds)
const LOCK = 0;
const HASH_LOW = 1;
const HASH_HIGH = 2;
const LAST_USE = 3;
const PROBE_WINDOW = 16;

export interface SharedTableInit {
  buffer: SharedArrayBuffer;
  slots: number;
  payloadWords: number;
}

export class SharedTable {
  readonly slots: number;
  readonly payloadWords: number;
  readonly buffer: SharedArrayBuffer;
  readonly #stride: number;
  readonly #headers: Int32Array;
  readonly #payload: Float64Array;

  /** A new table: `slots` entries of `payloadWords` float64 each. */
  static create(slots: number, payloadWords: number): SharedTable {
    const stride = HEADER_BYTES + 8 * payloadWords;
    return new SharedTable({ buffer: new SharedArrayBuffer(slots * stride), slots, payloadWords });
  }

  /** The same table seen from another thread (from `init`, sent in workerData). */
  constructor(init: SharedTableInit) {
    this.buffer = init.buffer;
    this.slots = init.slots;
    this.payloadWords = init.payloadWords;
    this.#stride = HEADER_BYTES + 8 * init.payloadWords;
    this.#headers = new Int32Array(init.buffer);
    this.#payload = new Float64Array(init.buffer);
  }

  get init(): SharedTableInit {
    return { buffer: this.buffer, slots: this.slots, payloadWords: this.payloadWords };
  }

  /**
   * Runs `work` on the slot of `key` while holding its lock. `words` is the table's payload array
   * and `offset` the slot's first payload word; `fresh` is true when the slot was just (re)claimed
   * for this key and its words are zero.
   */
  update<T>(key: string, nowSeconds: number, work: (words: Float64Array, offset: number, fresh: boolean) => T): T {
    const [low, high] = hash64(key);
    const start = (low >>> 0) % this.slots;
    let victim = -1;
    let victimUse = Infinity;
    for (let step = 0; step < PROBE_WINDOW; step++) {
      const slot = (start + step) % this.slots;
      const header = (slot * this.#stride) >> 2;
      this.#lock(header);
      const slotLow = Atomics.load(this.#headers, header + HASH_LOW);
      const slotHigh = Atomics.load(this.#headers, header + HASH_HIGH);
      if (slotLow === low && slotHigh === high) return this.#run(slot, header, nowSeconds, false, work);
      if (slotLow === 0 && slotHigh === 0) return this.#claim(slot, header, low, high, nowSeconds, work);
      const lastUse = Atomics.load(this.#headers, header + LAST_USE);
      if (lastUse < victimUse) {
        victim = slot;
        victimUse = lastUse;
      }
      this.#unlock(header);
    }
    // Every slot of the window is taken: take over the one used longest ago. Between the scan and
    // this lock another thread may have claimed it for the same key; then it is simply ours too.
    // (Under such eviction pressure a key can, rarely, end up in two slots and lose some counts:
    // that only happens while a flood of distinct sources fills the table.)
    const header = (victim * this.#stride) >> 2;
    this.#lock(header);
    if (Atomics.load(this.#headers, header + HASH_LOW) === low && Atomics.load(this.#headers, header + HASH_HIGH) === high) {
      return this.#run(victim, header, nowSeconds, false, work);
    }
    return this.#claim(victim, header, low, high, nowSeconds, work);
  }

  /** Slots in use (a full scan: for tests and metrics, not for the hot path). */
  get used(): number {
    let count = 0;
    for (let slot = 0; slot < this.slots; slot++) {
      const header = (slot * this.#stride) >> 2;
      if (Atomics.load(this.#headers, header + HASH_LOW) !== 0 || Atomics.load(this.#headers, header + HASH_HIGH) !== 0) count++;
    }
    return count;
  }

  #claim<T>(
    slot: number,
    header: number,
    low: number,
    high: number,
    nowSeconds: number,
    work: (words: Float64Array, offset: number, fresh: boolean) => T,
  ): T {
    Atomics.store(this.#headers, header + HASH_LOW, low);
    Atomics.store(this.#headers, header + HASH_HIGH, high);
    const offset = (slot * this.#stride + HEADER_BYTES) >> 3;
    this.#payload.fill(0, offset, offset + this.payloadWords);
    return this.#run(slot, header, nowSeconds, true, work);
  }

  #run<T>(
    slot: number,
    header: number,
    nowSeconds: number,
    fresh: boolean,
    work: (words: Float64Array, offset: number, fresh: boolean) => T,
  ): T {
    try {
      Atomics.store(this.#headers, header + LAST_USE, nowSeconds | 0);
      return work(this.#payload, (slot * this.#stride + HEADER_BYTES) >> 3, fresh);
    } finally {
      this.#unlock(header);
    }
  }

  #lock(header: number): void {
    // Critical sections are a few loads and stores: spinning beats parking a thread here.
    while (Atomics.compareExchange(this.#headers, header + LOCK, 0, 1) !== 0) {
      // spin
    }
  }

  #unlock(header: number): void {
    Atomics.store(this.#headers, header + LOCK, 0);
  }
}

/** FNV-1a over UTF-16 code units, 64 bits as two int32 halves; never (0, 0), which marks a free slot. */
export function hash64(key: string): [number, number] {
  let low = 0x84222325 | 0;
  let high = 0xcbf29ce4 | 0;
  for (let i = 0; i < key.length; i++) {
    low ^= key.charCodeAt(i);
    // Multiply the 64-bit value by the FNV prime 0x100000001b3 with 32-bit halves.
    const lowProduct = Math.imul(low, 0x1b3);
    const carry = Math.floor(((low >>> 0) * 0x1b3) / 0x100000000);
    high = (Math.imul(high, 0x1b3) + Math.imul(low, 0x100) + carry) | 0;
    low = lowProduct | 0;
  }
  if (low === 0 && high === 0) low = 1;
  return [low, high];
}
