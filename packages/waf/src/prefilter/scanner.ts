/**
 * The literal prefilter's scanner and what it leaves in a compiled rule set (literal-prefilter.ts
 * builds them; transaction/literal-cache.ts reads them): one Aho-Corasick automaton over the
 * literals of every prefiltered rule, whose states carry the bit set of the rules whose literals
 * end there, so one pass over a string gives every rule that may match it. The automaton and its
 * byte loop are hand-written (not a library) because they are the hot path.
 */
import { buildAutomaton } from '../operators/aho-corasick.ts';

/**
 * Values from this length on are scanned as two halves at once (LiteralScanner.scan): a step
 * waits for the table load of the step before it, so one pass runs at the memory's latency,
 * and two independent passes overlap their loads. Measured on the bench's requests' values with
 * the caches cold, as in the engine: the scan ~20 % faster on a benign GET's values, ~30 % on a
 * 1 KB form's long ones; four passes were slower than two. The threshold is a judgement, not a
 * measurement: a shorter value's halves would be a few steps each.
 */
const TWO_PASSES_FROM = 16;

export class LiteralScanner {
  /** Bit-set words per value (one bit per rule). */
  readonly words: number;
  private readonly classOf: Uint8Array;
  private readonly classCount: number;
  /** next[state * classCount + cls] = next state (Uint16Array when the states fit: half the memory). */
  private readonly next: Int32Array | Uint16Array;
  /**
   * The states where literals end are numbered from here on (the others breadth-first before
   * them, then these breadth-first): the scan tells them by their number, not by a load from
   * another table for every byte (benign text visits them at about 1 byte in 5; the scan ~25 %
   * faster).
   */
  private readonly firstAccepting: number;
  /** Per state from firstAccepting: where the bits of the rules whose literals end there start in `pairs`. */
  private readonly pairsAt: Int32Array;
  /**
   * The rule bits of each such state, sparse (most literals belong to one or a few rules):
   * (word, bits) pairs, each state's run ended by a word of -1.
   */
  private readonly pairs: Int32Array;
  /**
   * Per state: the length of the literal prefix it stands for (its depth in the trie), for the
   * two-pass scan; undefined when some literal is longer than 255 bytes (then a value is scanned
   * in one pass).
   */
  private readonly depth: Uint8Array | undefined;

  /** `rules[j]`: the literals of rule j (matched ASCII case-insensitively). */
  constructor(rules: readonly (readonly string[])[]) {
    const words = Math.max(1, Math.ceil(rules.length / 32));
    this.words = words;
    const owners: number[] = [];
    const literals: string[] = [];
    rules.forEach((list, rule) => {
      for (const l of list) {
        literals.push(l);
        owners.push(rule);
      }
    });
    const automaton = buildAutomaton(literals);
    this.classOf = automaton.classOf;
    this.classCount = automaton.classCount;
    // a state's rules as a bit set, with those of its failure state (shorter literals ending there too)
    const bitsAt: (Int32Array | undefined)[] = automaton.ends.map((e) => {
      if (e === undefined) return undefined;
      const bits = new Int32Array(words);
      for (const index of e) bits[owners[index]! >> 5]! |= 1 << (owners[index]! & 31);
      return bits;
    });
    for (const s of automaton.order) {
      const inherited = bitsAt[automaton.fail[s]!];
      if (inherited === undefined) continue;
      const bits = (bitsAt[s] ??= new Int32Array(words));
      for (let w = 0; w < words; w++) bits[w]! |= inherited[w]!;
    }
    const states = automaton.states;
    const renamed = new Int32Array(states);
    let named = 0;
    for (let s = 0; s < states; s++) if (bitsAt[s] === undefined) renamed[s] = named++;
    const firstAccepting = named;
    for (let s = 0; s < states; s++) if (bitsAt[s] !== undefined) renamed[s] = named++;
    const classCount = automaton.classCount;
    const from = automaton.next;
    const next = from instanceof Uint16Array ? new Uint16Array(from.length) : new Int32Array(from.length);
    for (let s = 0; s < states; s++) {
      const row = renamed[s]! * classCount;
      for (let c = 0; c < classCount; c++) next[row + c] = renamed[from[s * classCount + c]!]!;
    }
    const pairsAt = new Int32Array(states - firstAccepting);
    const pairs: number[] = [];
    bitsAt.forEach((bits, s) => {
      if (bits === undefined) return;
      pairsAt[renamed[s]! - firstAccepting] = pairs.length;
      for (let w = 0; w < words; w++) if (bits[w] !== 0) pairs.push(w, bits[w]!);
      pairs.push(-1);
    });
    // depths by breadth-first search over the transitions: the shortest way to a state is its literal prefix
    const depth = new Int32Array(states).fill(-1);
    depth[0] = 0;
    const queue = [0];
    for (let q = 0; q < queue.length; q++) {
      const s = queue[q]!;
      for (let c = 0; c < classCount; c++) {
        const t = from[s * classCount + c]!;
        if (depth[t] !== -1) continue;
        depth[t] = depth[s]! + 1;
        queue.push(t);
      }
    }
    let deepest = 0;
    for (let s = 0; s < states; s++) deepest = Math.max(deepest, depth[s]!);
    if (deepest <= 0xff) {
      const byState = new Uint8Array(states);
      for (let s = 0; s < states; s++) byState[renamed[s]!] = depth[s]!;
      this.depth = byState;
    }
    this.firstAccepting = firstAccepting;
    this.pairsAt = pairsAt;
    this.pairs = Int32Array.from(pairs);
    this.next = next;
  }

  /**
   * ORs into out[at ...] the bits of the rules whose literals occur in `input`.
   *
   * A long value is scanned as two halves at once (TWO_PASSES_FROM): the second pass starts at
   * the middle from the root, the first goes on past the middle until its state's literal prefix
   * lies wholly in the second half. From there on, both passes are in the same state (a state is
   * the longest suffix of what was read that is a literal prefix, and that suffix was read by
   * both), so every literal ending in the second half is seen by one of the passes, and a pass
   * reports only literals that do occur. At most one and a half passes over the value.
   */
  scan(input: string, out: Int32Array, at = 0): void {
    const { classOf, classCount, next, firstAccepting, pairsAt, pairs, depth } = this;
    const n = input.length;
    if (n < TWO_PASSES_FROM || depth === undefined) {
      let s = 0;
      for (let i = 0; i < n; i++) {
        s = next[s * classCount + classOf[input.charCodeAt(i) & 0xff]!]!;
        if (s < firstAccepting) continue;
        for (let p = pairsAt[s - firstAccepting]!; pairs[p]! >= 0; p += 2) out[at + pairs[p]!]! |= pairs[p + 1]!;
      }
      return;
    }
    const mid = n >> 1;
    let a = 0;
    let b = 0;
    for (let i = 0, j = mid; i < mid; i++, j++) {
      a = next[a * classCount + classOf[input.charCodeAt(i) & 0xff]!]!;
      b = next[b * classCount + classOf[input.charCodeAt(j) & 0xff]!]!;
      if (a >= firstAccepting) for (let p = pairsAt[a - firstAccepting]!; pairs[p]! >= 0; p += 2) out[at + pairs[p]!]! |= pairs[p + 1]!;
      if (b >= firstAccepting) for (let p = pairsAt[b - firstAccepting]!; pairs[p]! >= 0; p += 2) out[at + pairs[p]!]! |= pairs[p + 1]!;
    }
    // the last byte of an odd length
    for (let j = mid << 1; j < n; j++) {
      b = next[b * classCount + classOf[input.charCodeAt(j) & 0xff]!]!;
      if (b >= firstAccepting) for (let p = pairsAt[b - firstAccepting]!; pairs[p]! >= 0; p += 2) out[at + pairs[p]!]! |= pairs[p + 1]!;
    }
    // the first pass, on until the second has caught up with it (its prefix read from `mid` on)
    for (let i = mid; i < n && depth[a]! > i - mid; i++) {
      a = next[a * classCount + classOf[input.charCodeAt(i) & 0xff]!]!;
      if (a >= firstAccepting) for (let p = pairsAt[a - firstAccepting]!; pairs[p]! >= 0; p += 2) out[at + pairs[p]!]! |= pairs[p + 1]!;
    }
  }
}

/**
 * `Ref`: a rule's variable read (the program's VarRef), a parameter so that this module, which the
 * program's types import, imports nothing of the program back.
 */
export interface LiteralPrefilters<Ref = unknown> {
  /** The literals of every prefiltered rule, a bit per rule (RulePrefilter.word and mask). */
  readonly scanner: LiteralScanner;
  /**
   * Per source (a variable read through one transformation chain node: `ARGS` lower-cased,
   * `REQUEST_FILENAME` URL-decoded ...): its chain node.
   */
  readonly nodes: Int32Array;
  /**
   * Per source: 1 when its values can change while a phase runs (MATCHED_VAR and the other
   * computed single variables, MATCHED_VARS): checked at every read; the others are read once per
   * phase (ARGS, headers and the other lists are filled before the phase that reads them; a single
   * variable set during a phase makes the transaction look again, Transaction.setSingle).
   */
  readonly changing: Uint8Array;
  /**
   * Per list source: the source of the same list read raw (chain node 0; itself when it is one);
   * -1 for single variables.
   */
  readonly rawOf: Int32Array;
  /**
   * Per list source: the byte kinds that make some step of its chain change a value
   * (TransformationNode.chainChangesOn), -1 when a step always runs. Values with none of them
   * have their raw bits, so the union of such a source is its raw source's union and the bits of
   * its values that do change (a superset of its exact union when a step removes a literal: the
   * rule's values are then checked one by one).
   */
  readonly chainMask: Int32Array;
  /**
   * Per source: one of its variable reads (all read the same values: a source is keyed by the
   * read's kind, list, filter with its exclusions, and name), so that the loop brings a source up
   * to date without touching the rule that asks.
   */
  readonly refs: readonly Ref[];
}

/** What the loop needs to ask whether some value of a rule's variables may match (CompiledRule.prefilter). */
export interface RulePrefilter {
  /**
   * Per variable (parallel to CompiledRule.refs): its source, or -1 for an XML read. A multiMatch
   * rule has one such run per chain node its operator sees (the value as it is, then each step):
   * source k reads variable k % refs.length.
   */
  readonly sources: Int32Array;
  /** The word and the bit of the rule in the scanner's bit sets. */
  readonly word: number;
  readonly mask: number;
  /**
   * The chain node its values are scanned after (the rule's, less a final change of case); the
   * loop checks a value's own bits there (not for multiMatch, whose values it checks at `steps`).
   */
  readonly node: number;
  /** The chain nodes its sources read its variables at, in order: `node`, or for multiMatch the value as it is and each step. */
  readonly steps: Int32Array;
}

/**
 * A phase's prefiltered rules laid out by position, for the rule loop to pass over the rules that
 * cannot match without touching their objects (most rules of a benign request: on this machine
 * the first touch of a rule's objects cost more than deciding from its sources' unions).
 */
export interface PhasePrefilters {
  /** Per entry of the phase: where its record starts in `records`, or -1 (a marker, or a rule evaluated as such). */
  readonly at: Int32Array;
  /** Records of [word, mask, source count, its sources (RulePrefilter.sources; -1: an XML read) ...]. */
  readonly records: Int32Array;
}
