/**
 * Case-insensitive (ASCII) multi-pattern search for @pm / @pmFromFile, as ModSecurity's acmp:
 * "does any pattern occur in the input", with the matched pattern for capture. Linear in the
 * input: a deterministic automaton over byte classes (the bytes that occur in some pattern, plus
 * one class for every other byte), stored as one Int32Array.
 */

export class AhoCorasick {
  private readonly classOf: Uint8Array;
  private readonly classCount: number;
  /** next[state * classCount + cls] = next state. */
  private readonly next: Int32Array;
  /** Index of a pattern that ends at this state (longest), or -1. */
  private readonly output: Int32Array;
  private readonly patterns: readonly string[];
  readonly empty: boolean;

  constructor(patterns: readonly string[]) {
    const lower = (c: number): number => (c >= 0x41 && c <= 0x5a ? c + 0x20 : c);
    const list = patterns.filter((p) => p.length > 0);
    this.patterns = list;
    this.empty = list.length === 0;
    // byte classes
    const classOf = new Uint8Array(256);
    let classes = 1; // class 0: bytes that occur in no pattern
    const seen = new Map<number, number>();
    for (const p of list) {
      for (let i = 0; i < p.length; i++) {
        const c = lower(p.charCodeAt(i) & 0xff);
        if (!seen.has(c)) {
          if (classes >= 255) throw new Error('too many distinct bytes in @pm patterns');
          seen.set(c, classes++);
        }
      }
    }
    for (let c = 0; c < 256; c++) classOf[c] = seen.get(lower(c)) ?? 0;
    this.classOf = classOf;
    this.classCount = classes;
    // trie
    const goto: Map<number, number>[] = [new Map()];
    const out: number[] = [-1];
    const depth: number[] = [0];
    list.forEach((p, index) => {
      let s = 0;
      for (let i = 0; i < p.length; i++) {
        const cls = classOf[p.charCodeAt(i) & 0xff]!;
        let t = goto[s]!.get(cls);
        if (t === undefined) {
          t = goto.length;
          goto.push(new Map());
          out.push(-1);
          depth.push(depth[s]! + 1);
          goto[s]!.set(cls, t);
        }
        s = t;
      }
      if (out[s] === -1) out[s] = index;
    });
    const n = goto.length;
    const next = new Int32Array(n * classes);
    const fail = new Int32Array(n);
    const queue: number[] = [];
    for (let cls = 0; cls < classes; cls++) {
      const t = goto[0]!.get(cls);
      next[cls] = t ?? 0;
      if (t !== undefined) {
        fail[t] = 0;
        queue.push(t);
      }
    }
    for (let q = 0; q < queue.length; q++) {
      const s = queue[q]!;
      // an output reachable by failure links also ends here
      if (out[s] === -1 && out[fail[s]!] !== -1) out[s] = out[fail[s]!]!;
      for (let cls = 0; cls < classes; cls++) {
        const t = goto[s]!.get(cls);
        if (t !== undefined) {
          fail[t] = next[fail[s]! * classes + cls]!;
          next[s * classes + cls] = t;
          queue.push(t);
        } else {
          next[s * classes + cls] = next[fail[s]! * classes + cls]!;
        }
      }
    }
    this.next = next;
    this.output = Int32Array.from(out);
  }

  /** The first pattern found (by end position), or undefined. */
  search(input: string): string | undefined {
    const { classOf, classCount, next, output } = this;
    let s = 0;
    for (let i = 0; i < input.length; i++) {
      s = next[s * classCount + classOf[input.charCodeAt(i) & 0xff]!]!;
      const o = output[s]!;
      if (o >= 0) return this.patterns[o];
    }
    return undefined;
  }

  test(input: string): boolean {
    const { classOf, classCount, next, output } = this;
    let s = 0;
    for (let i = 0; i < input.length; i++) {
      s = next[s * classCount + classOf[input.charCodeAt(i) & 0xff]!]!;
      if (output[s]! >= 0) return true;
    }
    return false;
  }
}
