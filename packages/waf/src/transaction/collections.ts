/**
 * A transaction's variables and state: the list collections (ARGS, REQUEST_HEADERS ...), the
 * single variables (REQUEST_URI, MATCHED_VAR ...), the dynamic collections (TX, IP ...), MATCHED_VARS,
 * and what the actions set (ctl: removals, rule engine, body processor; skips; the intervention; the
 * logged messages). ModSecurity v3.0.9's model: keys compare case-insensitively, each value
 * carries the "COLLECTION:key" name exclusions compare byte for byte.
 *
 * This is the base of Transaction (rule-loop.ts); the value cache (value-cache.ts,
 * literal-cache.ts) and the rule loop build on it.
 */
import { lowerAscii } from '../ascii.ts';
import { WafBudgetExceededError } from '../engine.ts';
import { DEFAULT_INPUT_LIMITS, limitTxKey } from '../input-limits.ts';
import { threadCpuMicros } from '../thread-cpu.ts';
import type { InputLimitName, ResolvedInputLimits } from '../input-limits.ts';
import type { EngineConfig } from '../seclang/engine-config.ts';
import { NONE_ALLOW, noIntervention } from './interventions.ts';
import type { Intervention } from './interventions.ts';
import type { LoggedMessage } from './messages.ts';
import type { DynVar } from './dyn-var.ts';
import { DISPOSED_TX, knownTxSlot, TxStore, updateVar } from './tx-store.ts';
import { newBox, newEntry } from './value-cache.ts';
import type { Entry, ValueBox } from './value-cache.ts';

/** The XML body's document (XML:/*, XML://@*), when the XML processor built one. */
export interface XmlValues {
  readonly rootText: string | undefined;
  readonly attributes: readonly string[];
}

/** Slots of single variables, process-wide; the computed ones (never cached) come first. */
const SLOTS = new Map<string, number>();
for (const name of ['DURATION', 'HIGHEST_SEVERITY', 'TIME_EPOCH', 'MATCHED_VAR', 'MATCHED_VAR_NAME']) SLOTS.set(name, SLOTS.size);
const COMPUTED_SLOTS = SLOTS.size;

/** Single variables whose value is computed at each read (MATCHED_VAR, DURATION ...): they change while a phase runs. */
export function isComputedSingle(slot: number): boolean {
  return slot < COMPUTED_SLOTS;
}

export function singleSlot(name: string): number {
  let slot = SLOTS.get(name);
  if (slot === undefined) {
    slot = SLOTS.size;
    SLOTS.set(name, slot);
  }
  return slot;
}

const URLENCODED_ERROR_SLOT = singleSlot('URLENCODED_ERROR');
const UNIQUE_ID_SLOT = singleSlot('UNIQUE_ID');

/**
 * Units of work between two looks at the clock: a rule run on a short value is one unit, each KiB
 * of a value one more. A look costs a performance.now() (tens of nanoseconds); 32 units are tens
 * to hundreds of microseconds of work, so a transaction ends within that of its deadline unless a
 * single step runs long (what the input limits bound: the length of a value, their number).
 */
const WORK_BETWEEN_CLOCK_READS = 32;

/** A disposed transaction's collections (frozen: writing to them throws). */
export const DISPOSED = Object.freeze([]) as unknown as Entry[];

/** Per-process counter for unique ids when the caller gives none. */
let uniqueCounter = 0;

export class TransactionCollections {
  readonly config: EngineConfig;
  /** The caller's id, or the one made when UNIQUE_ID is first read (most transactions never read it). */
  private uniqueId: string | undefined;

  // --- collections ---
  args: Entry[] = [];
  argsGet: Entry[] = [];
  argsPost: Entry[] = [];
  requestHeaders: Entry[] = [];
  requestHeadersNames: Entry[] = [];
  requestCookies: Entry[] = [];
  requestCookiesNames: Entry[] = [];
  files: Entry[] = [];
  filesNames: Entry[] = [];
  filesSizes: Entry[] = [];
  filesTmpNames: Entry[] = [];
  filesTmpContent: Entry[] = [];
  multipartFilename: Entry[] = [];
  multipartName: Entry[] = [];
  multipartPartHeaders: Entry[] = [];
  /**
   * MATCHED_VARS as names and values; their entries are built only when a rule reads the list
   * (matchedList()): most matches (paranoia gates, initialisation checks) are never read back.
   * The first `matchedCount` slots are the matches since the last cleaning, which resets the
   * count: the arrays are written over in place, not allocated anew after every match (~130 per
   * request).
   */
  private readonly matchedKeys: string[] = [];
  private readonly matchedValues: string[] = [];
  private matchedCount = 0;
  private matchedVars: Entry[] = [];
  private matchedVarsNames: Entry[] = [];
  responseHeaders: Entry[] = [];
  responseHeadersNames: Entry[] = [];
  geo: Entry[] = [];
  env = new Map<string, string>();
  /** The dynamic collections other than TX (IP, GLOBAL ...), made on first use. */
  private collections: Map<string, Map<string, DynVar>> | undefined;
  /** The TX collection. */
  txStore = new TxStore();
  /** MATCHED_VAR and MATCHED_VAR_NAME. */
  matchedVar: string | undefined;
  matchedVarName: string | undefined;
  /** Single variables by slot (singleSlot()): values and their entries (built on first read). */
  private sv: (string | undefined)[];
  private se: (Entry | undefined)[];
  /** ARGS_NAMES & co, built from their collection as it grows. */
  private nameLists = new Map<readonly Entry[], Entry[]>();
  private argsCombinedSize = 0;
  /** The XML body's document (XML:/*, XML://@*), when the XML processor built one. */
  xmlDocument: XmlValues | undefined;
  private xmlEntryCache: Entry | undefined;

  // --- state the actions set ---
  ruleEngine: 'On' | 'Off' | 'DetectionOnly' | undefined;
  requestBodyProcessor: 'XML' | 'JSON' | 'URLENCODED' | undefined;
  /** Set from Content-Type: multipart or urlencoded. */
  requestBodyType: 'MULTIPART' | 'URLENCODED' | undefined;
  requestBodyAccess: boolean | undefined;
  /** The marker a skipAfter jumps to, until the loop reaches it. */
  marker: string | undefined;
  skipNext = 0;
  /** interventions.ts NONE_ALLOW, ALLOW_*. */
  allowType = NONE_ALLOW;
  ruleRemoveById: number[] = [];
  ruleRemoveByIdRange: [number, number][] = [];
  ruleRemoveByTag: string[] = [];
  ruleRemoveTargetById: [number, string][] = [];
  ruleRemoveTargetByTag: [string, string][] = [];
  readonly intervention: Intervention = noIntervention();
  readonly messages: LoggedMessage[] = [];
  highestSeverity = 255;
  private readonly started = process.hrtime.bigint();
  protected currentPhase = 0;
  /**
   * Counts evaluatePhase() calls and single variables set (a list or a single variable read in
   * one is up to date for the rest of it). From 1: a prefilter union stamped 0 is never current
   * (literal-cache.ts).
   */
  protected phaseRun = 1;
  /**
   * performance.now() at which the budget is looked at (startBudget): the earliest moment this
   * inspection may have used it up. Infinity: no budget.
   */
  private deadline = Number.POSITIVE_INFINITY;
  /** The inspection budget (startBudget), in ms of this thread's CPU time. */
  private budgetMs = 0;
  /** This thread's CPU time (µs, user + system) when the budget started. */
  private cpuAtStart = 0;
  private workLeft = WORK_BETWEEN_CLOCK_READS;
  /** What this request may make the parsers produce (input-limits.ts); the inspector sets the proxy's. */
  inputLimits: ResolvedInputLimits = DEFAULT_INPUT_LIMITS;
  /** The input limit this request went past (its parser stopped there), if any. */
  inputLimitExceeded: InputLimitName | undefined;

  constructor(config: EngineConfig, id?: string) {
    this.config = config;
    // at their full length at once: set by slot, out of order, they grew by steps in every request
    this.sv = new Array(SLOTS.size);
    this.se = new Array(SLOTS.size);
    this.sv[URLENCODED_ERROR_SLOT] = '0';
    this.uniqueId = id;
  }

  /**
   * Counts `units` of work and, every WORK_BETWEEN_CLOCK_READS, ends the transaction if it is past
   * its deadline: the cooperative budget, checked between values (and between values' steps), so
   * that a slow request ends alone instead of holding (and costing) its thread. Small enough to be
   * inlined where it is counted; the look at the clock is a call of its own.
   */
  protected work(units: number): void {
    if ((this.workLeft -= units) <= 0) this.lookAtClock();
  }

  private lookAtClock(): void {
    this.workLeft = WORK_BETWEEN_CLOCK_READS;
    if (performance.now() > this.deadline) this.checkBudget();
  }

  /**
   * Starts this inspection's budget: `budgetMs` of the thread's CPU time from now. CPU time, not
   * wall time: on a busy machine the thread is preempted, and a request must not fail for the time
   * other processes took. The wall clock (cheap to read) says when to look at the CPU clock (a
   * system call): never before `budgetMs` of wall time, since CPU time cannot run faster.
   * `cpuAtStartMicros`: the thread's CPU time when the inspection started, when the caller read it
   * already (threadCpuMicros), so that one reading serves the budget and what the request is charged.
   */
  startBudget(budgetMs: number, cpuAtStartMicros: number = threadCpuMicros()): void {
    this.budgetMs = budgetMs;
    this.cpuAtStart = cpuAtStartMicros;
    this.deadline = performance.now() + budgetMs;
  }

  private checkBudget(): void {
    const leftMs = this.budgetMs - (threadCpuMicros() - this.cpuAtStart) / 1000;
    if (leftMs <= 0) {
      throw new WafBudgetExceededError(`WAF inspection ran past its ${this.budgetMs} ms budget (phase ${this.currentPhase})`);
    }
    this.deadline = performance.now() + leftMs;
  }

  get id(): string {
    return (this.uniqueId ??= `${Date.now().toString(16)}${(++uniqueCounter).toString(16).padStart(8, '0')}`);
  }

  /** The SecLang phase being evaluated (1-5, 0: connection). */
  get phase(): number {
    return this.currentPhase;
  }

  engineState(): 'On' | 'Off' | 'DetectionOnly' {
    return this.ruleEngine ?? this.config.ruleEngine;
  }

  /** A single variable's value when none was set: UNIQUE_ID is made on demand. */
  private unsetSingle(slot: number): string {
    return slot === UNIQUE_ID_SLOT ? this.id : '';
  }

  // ------------------------------------------------------------------ dynamic collections

  /** IP, GLOBAL ... (created on first use); TX is txStore. */
  collection(name: string): Map<string, DynVar> {
    if (name === 'TX') throw new Error('the TX collection is txStore');
    this.collections ??= new Map();
    let c = this.collections.get(name);
    if (!c) {
      c = new Map();
      this.collections.set(name, c);
    }
    return c;
  }

  /** store() with the collection and the lower-cased key at hand. */
  storeIn(c: Map<string, DynVar>, key: string, lk: string, value: string): void {
    const v = c.get(lk);
    if (v) this.update(v, value);
    else c.set(lk, { key, lowerKey: lk, value, box: undefined, entry: undefined });
  }

  /** store() of a variable already looked up (setvar's `+=`, which read it first). */
  update(v: DynVar, value: string): void {
    updateVar(v, value);
  }

  setTx(key: string, value: string): void {
    const lk = lowerAscii(key);
    this.txStore.store(knownTxSlot(lk), key, lk, value);
  }

  /** TX.n of a capture (operators with `capture`): the keys are digits, no case to fold. */
  setCapture(group: number, value: string): void {
    this.txStore.setCapture(group, value);
  }

  getTx(key: string): string | undefined {
    return this.txStore.get(lowerAscii(key))?.value;
  }

  dynamicEntry(collection: string, key: string, v: DynVar): Entry {
    const e = v.entry;
    if (e !== undefined && e.key === key) return e;
    const entry: Entry = { key, full: `${collection}:${key}`, box: (v.box ??= newBox(v.value)), uk: undefined };
    v.entry = entry;
    return entry;
  }

  // ------------------------------------------------------------------ list collections

  /** The list collection LIST_COLLECTIONS[index] (seclang/program.ts). */
  listAt(index: number): Entry[] {
    switch (index) {
      case 0:
        return this.args;
      case 1:
        return this.argsGet;
      case 2:
        return this.argsPost;
      case 3:
        return this.requestHeaders;
      case 4:
        return this.requestHeadersNames;
      case 5:
        return this.requestCookies;
      case 6:
        return this.requestCookiesNames;
      case 7:
        return this.files;
      case 8:
        return this.filesNames;
      case 9:
        return this.filesSizes;
      case 10:
        return this.filesTmpNames;
      case 11:
        return this.filesTmpContent;
      case 12:
        return this.multipartFilename;
      case 13:
        return this.multipartName;
      case 14:
        return this.multipartPartHeaders;
      case 15:
        return this.matchedList(false);
      case 16:
        return this.matchedList(true);
      case 17:
        return this.responseHeaders;
      case 18:
        return this.responseHeadersNames;
      case 19:
        return this.geo;
      default:
        throw new Error(`no list collection ${index}`);
    }
  }

  /** ARGS_NAMES-style entries (key -> key) for a collection's list, in the same order. */
  namesOf(collection: string, list: readonly Entry[]): Entry[] {
    let names = this.nameLists.get(list);
    if (names === undefined) {
      names = [];
      this.nameLists.set(list, names);
    }
    for (let k = names.length; k < list.length; k++) {
      const key = list[k]!.key;
      names.push({ key, full: `${collection}:${key}`, box: newBox(key), uk: undefined });
    }
    return names;
  }

  /**
   * Marks the request as past an input limit (the parser that hit it stops): TX:tps_limit_<name>
   * for the engine settings' rule of that limit. The first limit hit is the one reported.
   */
  exceedInputLimit(name: InputLimitName): void {
    if (this.inputLimitExceeded !== undefined) return;
    this.inputLimitExceeded = name;
    this.setTx(limitTxKey(name), String(this.inputLimits[name]));
  }

  /**
   * Whether one more argument named `key` with `value` fits the input limits (arguments, value
   * length); marks the limit exceeded when not. Multipart adds its arguments itself, through this.
   */
  argumentFits(key: string, value: string): boolean {
    if (this.inputLimitExceeded !== undefined) return false;
    const limits = this.inputLimits;
    if (this.args.length >= limits.arguments) {
      this.exceedInputLimit('arguments');
      return false;
    }
    if (key.length > limits.valueLength || value.length > limits.valueLength) {
      this.exceedInputLimit('valueLength');
      return false;
    }
    return true;
  }

  /** Adds a request argument (ModSecurity's Transaction::addArgument); false when a limit refused it (the parser stops). */
  addArgument(origin: 'GET' | 'POST' | 'JSON', key: string, value: string): boolean {
    const limit = this.config.argumentsLimit;
    if (limit !== undefined && this.args.length >= limit) return false;
    if (!this.argumentFits(key, value)) return false;
    const box: ValueBox = newBox(value);
    this.args.push({ key, full: `ARGS:${key}`, box, uk: undefined });
    if (origin === 'GET') this.argsGet.push({ key, full: `ARGS_GET:${key}`, box, uk: undefined });
    else if (origin === 'POST') this.argsPost.push({ key, full: `ARGS_POST:${key}`, box, uk: undefined });
    this.argsCombinedSize += key.length + value.length;
    this.setSingle('ARGS_COMBINED_SIZE', String(this.argsCombinedSize));
    return true;
  }

  // ------------------------------------------------------------------ single variables

  setSingle(name: string, value: string): void {
    const slot = singleSlot(name);
    this.sv[slot] = value;
    this.se[slot] = undefined;
    // prefilter unions of single variables count as up to date for the rest of a phase: a
    // variable set while one runs (ctl:requestBodyProcessor) makes them all look again
    this.phaseRun++;
  }

  getSingle(name: string): string {
    const slot = singleSlot(name);
    return this.sv[slot] ?? this.unsetSingle(slot);
  }

  single(name: string): Entry {
    return this.singleAt(singleSlot(name), name);
  }

  /** A single variable by its slot (resolvers look the slot up once, at compile time). */
  singleAt(slot: number, name: string): Entry {
    const e = this.se[slot];
    if (e !== undefined) return e;
    if (slot < COMPUTED_SLOTS) {
      switch (name) {
        case 'DURATION':
          return newEntry(name, name, String(Number((process.hrtime.bigint() - this.started) / 1000n)));
        case 'HIGHEST_SEVERITY':
          return newEntry(name, name, String(this.highestSeverity));
        case 'TIME_EPOCH':
          return newEntry(name, name, String(Math.floor(Date.now() / 1000)));
        case 'MATCHED_VAR':
          return newEntry(name, name, this.matchedVar ?? '');
        case 'MATCHED_VAR_NAME':
          return newEntry(name, name, this.matchedVarName ?? '');
      }
    }
    const entry = newEntry(name, name, this.sv[slot] ?? this.unsetSingle(slot));
    this.se[slot] = entry;
    return entry;
  }

  /** singleAt(slot, name).box.v, without an entry for MATCHED_VAR and MATCHED_VAR_NAME (the logdata of every match). */
  singleValue(slot: number, name: string): string {
    if (slot < COMPUTED_SLOTS && this.se[slot] === undefined) {
      if (name === 'MATCHED_VAR') return this.matchedVar ?? '';
      if (name === 'MATCHED_VAR_NAME') return this.matchedVarName ?? '';
    }
    return this.singleAt(slot, name).box.v;
  }

  xmlEntry(fullName: string, text: string): Entry {
    if (this.xmlEntryCache === undefined || this.xmlEntryCache.box.v !== text) this.xmlEntryCache = newEntry(fullName, fullName, text);
    return this.xmlEntryCache;
  }

  // ------------------------------------------------------------------ MATCHED_VARS

  /** A value matched: it goes into MATCHED_VARS (and its name into MATCHED_VARS_NAMES). */
  addMatched(key: string, value: string): void {
    this.matchedKeys[this.matchedCount] = key;
    this.matchedValues[this.matchedCount] = value;
    this.matchedCount++;
  }

  /** A rule did not match: MATCHED_VAR, MATCHED_VAR_NAME and MATCHED_VARS are emptied. */
  cleanMatchedVars(): void {
    this.matchedVar = undefined;
    this.matchedVarName = undefined;
    this.matchedCount = 0;
    // a new list (not emptied in place): readers holding the old one see it unchanged, as with ModSecurity's copy
    if (this.matchedVars.length > 0) this.matchedVars = [];
    if (this.matchedVarsNames.length > 0) this.matchedVarsNames = [];
  }

  /** MATCHED_VARS (or MATCHED_VARS_NAMES) with an entry for every match so far. */
  private matchedList(names: boolean): Entry[] {
    const list = names ? this.matchedVarsNames : this.matchedVars;
    const keys = this.matchedKeys;
    for (let k = list.length; k < this.matchedCount; k++) {
      const key = keys[k]!;
      if (names) list.push({ key, full: `MATCHED_VARS_NAMES:${key}`, box: newBox(key), uk: undefined });
      else list.push({ key, full: `MATCHED_VARS:${key}`, box: newBox(this.matchedValues[k]!), uk: undefined });
    }
    return list;
  }

  /**
   * Lets go of the collections and their caches (dispose(), rule-loop.ts): the list collections
   * are frozen afterwards (adding to them throws).
   */
  protected releaseCollections(): void {
    this.args = this.argsGet = this.argsPost = DISPOSED;
    this.requestHeaders = this.requestHeadersNames = this.requestCookies = this.requestCookiesNames = DISPOSED;
    this.files = this.filesNames = this.filesSizes = this.filesTmpNames = this.filesTmpContent = DISPOSED;
    this.multipartFilename = this.multipartName = this.multipartPartHeaders = DISPOSED;
    this.matchedVars = this.matchedVarsNames = this.responseHeaders = this.responseHeadersNames = this.geo = DISPOSED;
    this.matchedKeys.length = this.matchedValues.length = this.matchedCount = 0;
    this.matchedVar = this.matchedVarName = undefined;
    // new empty containers rather than clear(): V8 gives an old Map's cleared table old memory
    this.env = new Map();
    this.collections = undefined;
    this.txStore = DISPOSED_TX;
    this.sv = [];
    this.se = [];
    this.nameLists = new Map();
    this.xmlDocument = this.xmlEntryCache = undefined;
    this.messages.length = 0;
  }
}
