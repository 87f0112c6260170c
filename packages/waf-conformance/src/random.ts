/**
 * The repository's one seeded generator (an LCG): the same values on every run, so that property
 * tests, the conformance corpora, the golden vectors built from them and benchmark inputs are
 * reproducible (Math.random cannot be seeded). Not for anything secret.
 */
export class Random {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0 || 1;
  }
  next(): number {
    this.state = (Math.imul(this.state, 1664525) + 1013904223) >>> 0;
    return this.state / 0x100000000;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(list: readonly T[]): T {
    return list[this.int(list.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** 32 random bits (an address): the high halves of two steps, as an LCG's low bits repeat soon. */
  uint32(): number {
    const high = this.next() * 0x10000;
    const low = this.next() * 0x10000;
    return ((high << 16) | low) >>> 0;
  }
}

/** A source of 32-bit values (`() => uint32`) from a seed. */
export function uint32s(seed: number): () => number {
  const random = new Random(seed);
  return () => random.uint32();
}
