/**
 * Literal prefilters: which rules can possibly match any value of a variable, without running
 * their operators.
 *
 * A rule takes part when its operator can only match a value that contains one of a set of
 * literals (ASCII case-insensitively): an `@rx` through the literals every match contains
 * (regex/prefilter.ts), an `@pm`/`@pmFromFile` through its own phrases. All those literals form
 * one Aho-Corasick automaton whose states carry the bit set of the rules whose literals end
 * there, so one pass over a string gives every rule that may match it. A transaction scans each
 * distinct string once (a benign GET reads ~50 distinct strings through ~350 variable and
 * transformation pairs: most transformations leave a plain value as it is) and keeps, per
 * "source" (one variable read through one transformation chain: `ARGS` lower-cased,
 * `REQUEST_FILENAME` URL-decoded ...), the union of its values' bits. A rule none of whose
 * sources has its bit costs a few bit tests instead of an operator run per value (on a benign
 * request, nearly all of them: about 1,000 operator runs of a GET become 100). A rule let through
 * runs its operator only on the values whose own bits have it.
 *
 * A source whose chain would leave every value as it is (no value has a byte any step acts on:
 * TransformationNode.chainChangesOn) takes the union of the same list read raw, plus the bits of
 * the values the chain does change: most sources of a benign request cost a copy, not a
 * transformation and a scan per value. The rule loop decides the rules that cannot match from
 * per-phase records of their sources (PhasePrefilters), without touching their objects.
 *
 * The automaton and its byte loop are hand-written (not a library) because they are the hot path.
 */
import type { CompiledRule, PhaseEntry, TransformationNode } from '../seclang/program.ts';
import { READ_FILTERED, READ_LIST, READ_NAMES, READ_SINGLE, READ_XML } from '../seclang/program.ts';
import { CompiledRegex } from '../regex/runtime.ts';
import { requiredLiterals } from '../regex/prefilter.ts';
import { buildAutomaton } from '../operators/aho-corasick.ts';

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
    this.firstAccepting = firstAccepting;
    this.pairsAt = pairsAt;
    this.pairs = Int32Array.from(pairs);
    this.next = next;
  }

  /** ORs into out[at ...] the bits of the rules whose literals occur in `input`. */
  scan(input: string, out: Int32Array, at = 0): void {
    const { classOf, classCount, next, firstAccepting, pairsAt, pairs } = this;
    let s = 0;
    for (let i = 0; i < input.length; i++) {
      s = next[s * classCount + classOf[input.charCodeAt(i) & 0xff]!]!;
      if (s < firstAccepting) continue;
      for (let p = pairsAt[s - firstAccepting]!; pairs[p]! >= 0; p += 2) out[at + pairs[p]!]! |= pairs[p + 1]!;
    }
  }
}

/** The literals without which a rule's operator cannot match, or undefined when it has none. */
export function operatorLiterals(rule: CompiledRule): readonly string[] | undefined {
  const op = rule.operator;
  if (op === undefined || op.negated || rule.multiMatch) return undefined;
  if (op.name === 'rx') {
    if (!(op.regex instanceof CompiledRegex)) return undefined;
    const literals = requiredLiterals(op.regex.translated.source);
    if (!literals || literals.length === 0 || literals.some((l) => l.length === 0)) return undefined;
    return literals;
  }
  // @pm matches exactly when one of its phrases occurs (its automaton ignores empty phrases)
  if (op.phrases !== undefined) return op.phrases.length > 0 ? op.phrases : undefined;
  return undefined;
}

export interface LiteralPrefilters {
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
}

/** What the loop needs to ask whether some value of a rule's variables may match (CompiledRule.prefilter). */
export interface RulePrefilter {
  /** Per variable (parallel to CompiledRule.refs): its source, or -1 for an XML read. */
  readonly sources: Int32Array;
  /** The word and the bit of the rule in the scanner's bit sets. */
  readonly word: number;
  readonly mask: number;
  /** The chain node its values are scanned after (the rule's, less a final change of case). */
  readonly node: number;
}

/**
 * A literal of one letter or digit (932105 and 932150, the Unix command rules, need one of
 * `v`, `s`, `p`, `w`, `n` ...): nearly every value has one, so such a rule would be let through
 * for nearly every value anyway, while its literals made most bytes of any text an accepting state
 * of the automaton (each one OR-ing rule bits). Such a rule is evaluated without prefilter.
 */
function isLetterOrDigit(literal: string): boolean {
  return literal.length === 1 && /[0-9A-Za-z]/.test(literal);
}

/** Reads whose values a source can scan and keep: lists (which only grow) and single variables. */
const SCANNABLE = new Set([READ_LIST, READ_NAMES, READ_FILTERED, READ_SINGLE]);

/** Transformations that only change the case of ASCII letters: the literals found stay the same. */
const CASE_ONLY = new Set(['lowercase', 'uppercase']);

/**
 * Builds the scanner of the rules with literals and their sources; sets CompiledRule.prefilter
 * on every rule whose variables are all scannable (the others are evaluated value by value, as
 * without prefilter). `growingLists`: the lists (Transaction.listAt indexes) that grow while a
 * phase runs; `computedSingle`: whether a single variable's slot is computed at each read.
 * `transformations`: the rule set's chain nodes.
 */
export function buildLiteralPrefilters(
  rules: readonly CompiledRule[],
  growingLists: ReadonlySet<number>,
  computedSingle: (slot: number) => boolean,
  transformations: readonly TransformationNode[],
): LiteralPrefilters {
  interface Source {
    readonly slot: number;
    readonly node: number;
    readonly changing: boolean;
    /** The slot of the same read's raw source (chain node 0), -1 for single variables. */
    readonly raw: number;
  }
  const sources = new Map<string, Source>();
  const sourceOf = (ref: CompiledRule['refs'][number], node: number): Source => {
    const key = `${ref.kind}:${ref.index}:${ref.cacheSlot}:${ref.name}@${node}`;
    let source = sources.get(key);
    if (source === undefined) {
      const changing = ref.kind === READ_SINGLE ? computedSingle(ref.index) : growingLists.has(ref.index);
      const raw = ref.kind === READ_SINGLE ? -1 : node === 0 ? sources.size : sourceOf(ref, 0).slot;
      source = { slot: sources.size, node, changing, raw };
      sources.set(key, source);
    }
    return source;
  };
  const literalsByRule: (readonly string[])[] = [];
  // a chain ending in lowercase (the CRS's usual last step) has the literals of the chain before
  // it, since the scanner ignores ASCII case: the source reads that one (one union and no
  // lower-cased copy for the values of both chains)
  const scannedNode = (node: number): number => {
    let n = node;
    while (n !== 0 && CASE_ONLY.has(transformations[n]!.name)) n = transformations[n]!.parent;
    return n;
  };
  for (const rule of rules) {
    const literals = operatorLiterals(rule);
    if (literals === undefined || literals.some(isLetterOrDigit)) continue;
    if (!rule.refs.every((ref) => SCANNABLE.has(ref.kind) || ref.kind === READ_XML)) continue;
    const j = literalsByRule.length;
    literalsByRule.push(literals);
    const slots = new Int32Array(rule.refs.length).fill(-1);
    const node = scannedNode(rule.tnode);
    rule.refs.forEach((ref, vi) => {
      if (ref.kind !== READ_XML) slots[vi] = sourceOf(ref, node).slot;
    });
    rule.prefilter = { sources: slots, word: j >> 5, mask: 1 << (j & 31), node };
  }
  const list = [...sources.values()];
  return {
    scanner: new LiteralScanner(literalsByRule),
    nodes: Int32Array.from(list.map((s) => s.node)),
    changing: Uint8Array.from(list.map((s) => (s.changing ? 1 : 0))),
    rawOf: Int32Array.from(list.map((s) => s.raw)),
    chainMask: Int32Array.from(list.map((s) => transformations[s.node]!.chainChangesOn)),
  };
}

/**
 * A phase's prefiltered rules laid out by position, for the rule loop to pass over the rules that
 * cannot match without touching their objects (most rules of a benign request: on this machine
 * the first touch of a rule's objects cost more than deciding from its sources' unions).
 */
export interface PhasePrefilters {
  /** Per entry of the phase: where its record starts in `records`, or -1 (a marker, or a rule evaluated as such). */
  readonly at: Int32Array;
  /** Records of [word, mask, variable count, source per variable (-1: an XML read) ...] (RulePrefilter). */
  readonly records: Int32Array;
}

/** PhasePrefilters of each phase: plain rules with a prefilter (not SecActions, TX checks or chain members). */
export function phasePrefilters(phases: readonly (readonly PhaseEntry[])[]): PhasePrefilters[] {
  return phases.map((list) => {
    const at = new Int32Array(list.length).fill(-1);
    const records: number[] = [];
    list.forEach((entry, k) => {
      const rule = entry.rule;
      const prefilter = rule?.prefilter;
      if (rule === undefined || prefilter === undefined || rule.type !== 'rule' || rule.txCheck !== undefined) return;
      at[k] = records.length;
      records.push(prefilter.word, prefilter.mask, prefilter.sources.length, ...prefilter.sources);
    });
    return { at, records: Int32Array.from(records) };
  });
}
