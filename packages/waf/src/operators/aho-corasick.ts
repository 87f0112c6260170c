/**
 * Case-insensitive (ASCII) multi-pattern search for @pm / @pmFromFile, as ModSecurity's acmp:
 * "does any pattern occur in the input", with the matched pattern for capture. Linear in the
 * input: a deterministic automaton over byte classes (the bytes that occur in some pattern, plus
 * one class for every other byte), stored as one transition table; buildAutomaton is shared with
 * the literal prefilters (literal-prefilter.ts).
 */

/** A deterministic Aho-Corasick automaton over byte classes, ASCII case-insensitive. */
export interface Automaton {
  /** Byte -> class: the bytes that occur in some pattern (lower-cased), plus class 0 for every other byte. */
  readonly classOf: Uint8Array;
  readonly classCount: number;
  /** next[state * classCount + cls] = next state (Uint16Array when the states fit: half the cache lines). */
  readonly next: Int32Array | Uint16Array;
  readonly states: number;
  /** Failure link per state. */
  readonly fail: Int32Array;
  /** The states in breadth-first order (a state's failure state comes before it). */
  readonly order: readonly number[];
  /** Per state: the indexes of the patterns that end exactly there (undefined: none). */
  readonly ends: readonly (number[] | undefined)[];
}

function lower(c: number): number {
  return c >= 0x41 && c <= 0x5a ? c + 0x20 : c;
}

/** Builds the automaton of non-empty patterns (latin1 strings). */
export function buildAutomaton(patterns: readonly string[]): Automaton {
  const classOf = new Uint8Array(256);
  let classes = 1; // class 0: bytes that occur in no pattern
  const seen = new Map<number, number>();
  for (const p of patterns) {
    for (let i = 0; i < p.length; i++) {
      const c = lower(p.charCodeAt(i) & 0xff);
      if (!seen.has(c)) {
        if (classes >= 255) throw new Error('too many distinct bytes in the patterns');
        seen.set(c, classes++);
      }
    }
  }
  for (let c = 0; c < 256; c++) classOf[c] = seen.get(lower(c)) ?? 0;
  // trie
  const goto: Map<number, number>[] = [new Map()];
  const ends: (number[] | undefined)[] = [undefined];
  patterns.forEach((p, index) => {
    if (p.length === 0) throw new Error('an empty pattern would match everywhere');
    let s = 0;
    for (let i = 0; i < p.length; i++) {
      const cls = classOf[p.charCodeAt(i) & 0xff]!;
      let t = goto[s]!.get(cls);
      if (t === undefined) {
        t = goto.length;
        goto.push(new Map());
        ends.push(undefined);
        goto[s]!.set(cls, t);
      }
      s = t;
    }
    (ends[s] ??= []).push(index);
  });
  return construct(classOf, classes, ...breadthFirst(goto, ends));
}

/**
 * The trie with its states renumbered breadth-first. Scanning text spends nearly all its steps in
 * the shallow states (a value rarely runs more than a few bytes into some literal), and the
 * prefilters' automaton has tens of thousands of states: numbered as inserted, the shallow ones'
 * rows lay scattered over megabytes of table; numbered breadth-first, they are its first rows
 * (a scan with cold caches ~10 % faster).
 */
function breadthFirst(
  goto: readonly Map<number, number>[],
  ends: readonly (number[] | undefined)[],
): [Map<number, number>[], (number[] | undefined)[]] {
  const order = [0];
  for (let q = 0; q < order.length; q++) for (const t of goto[order[q]!]!.values()) order.push(t);
  const renamed = new Int32Array(goto.length);
  order.forEach((old, state) => {
    renamed[old] = state;
  });
  const gotoRenamed = order.map((old) => {
    const m = new Map<number, number>();
    for (const [cls, t] of goto[old]!) m.set(cls, renamed[t]!);
    return m;
  });
  return [gotoRenamed, order.map((old) => ends[old])];
}

/** The deterministic automaton (transition table, failure links) of a trie. */
function construct(
  classOf: Uint8Array,
  classes: number,
  goto: readonly Map<number, number>[],
  ends: readonly (number[] | undefined)[],
): Automaton {
  const n = goto.length;
  const next = n <= 0xffff ? new Uint16Array(n * classes) : new Int32Array(n * classes);
  const fail = new Int32Array(n);
  const order: number[] = [];
  for (let cls = 0; cls < classes; cls++) {
    const t = goto[0]!.get(cls);
    next[cls] = t ?? 0;
    if (t !== undefined) order.push(t);
  }
  for (let q = 0; q < order.length; q++) {
    const s = order[q]!;
    for (let cls = 0; cls < classes; cls++) {
      const t = goto[s]!.get(cls);
      if (t !== undefined) {
        fail[t] = next[fail[s]! * classes + cls]!;
        next[s * classes + cls] = t;
        order.push(t);
      } else {
        next[s * classes + cls] = next[fail[s]! * classes + cls]!;
      }
    }
  }
  return { classOf, classCount: classes, next, states: n, fail, order, ends };
}

export class AhoCorasick {
  private readonly classOf: Uint8Array;
  private readonly classCount: number;
  private readonly next: Int32Array | Uint16Array;
  /** Index of a pattern that ends at this state (directly or through failure links), or -1. */
  private readonly output: Int32Array;
  /** The non-empty patterns. */
  readonly patterns: readonly string[];
  readonly empty: boolean;

  constructor(patterns: readonly string[]) {
    const list = patterns.filter((p) => p.length > 0);
    this.patterns = list;
    this.empty = list.length === 0;
    const automaton = buildAutomaton(list);
    this.classOf = automaton.classOf;
    this.classCount = automaton.classCount;
    this.next = automaton.next;
    const output = new Int32Array(automaton.states).fill(-1);
    automaton.ends.forEach((e, s) => {
      if (e !== undefined) output[s] = e[0]!;
    });
    // an output reachable by failure links also ends here
    for (const s of automaton.order) if (output[s] === -1) output[s] = output[automaton.fail[s]!]!;
    this.output = output;
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
