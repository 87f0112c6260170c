/**
 * One HTTP exchange against a CompiledRuleSet: the collections, the per-transaction state and the
 * rule evaluation loop. The loop follows ModSecurity v3.0.9 (RulesSet::evaluate,
 * RuleWithOperator::evaluate, RuleWithActions::executeActions*, performLogging) step by step,
 * because matching the reference engine's verdicts is the point; what differs is how values are
 * kept: every value is a "box" holding its transformation results by chain node, computed once
 * and shared by every rule asking for the same chain.
 */
import type {
  CompiledOperator,
  CompiledRule,
  CompiledRuleSet,
  CtlAction,
  DisruptiveAction,
  Expand,
  RuntimeAction,
  SetVarAction,
  TxCheck,
  VarRef,
} from '../seclang/program.ts';
import { READ_FILTERED, READ_LIST, READ_NAMES, READ_SINGLE, READ_TX_KEY, READ_XML } from '../seclang/program.ts';
import { compareNumeric, containsAny, runRegex, stoi } from '../operators/index.ts';
import { lowerAscii } from '../variables/resolvers.ts';
import { charMask } from '../transformations/index.ts';
import type { RulePrefilter } from '../prefilter/literal-prefilter.ts';

export interface ValueBox {
  readonly v: string;
  /**
   * Transformation results that differ from `v`, as (trie node, result) pairs: a value has a few
   * (a slot per trie node cost 400 bytes per value, kept as long as the transaction is open).
   */
  c: (number | string)[] | undefined;
  /** charMask(v) once a transformation asked for it, else -1. */
  m: number;
  /**
   * Chain nodes 1-31 (bit n) and 32-63 (`same2`, bit n - 32) known to leave `v` as it is: most
   * of them, for a benign value, which then needs no cache array (`c`) at all.
   */
  same: number;
  same2: number;
  /**
   * Where the prefilter scan of `v` is in its transaction's scannedBits (literalBits()), valid
   * while `scanEpoch` is that transaction's: a value read under many sources is looked up once,
   * not once per source by string.
   */
  scanAt: number;
  scanEpoch: number;
}

export interface Entry {
  /** Key within its collection (as stored), or the variable name for single variables. */
  readonly key: string;
  /** The key upper-cased (filled on first lookup). */
  readonly uk?: string;
  /** ModSecurity's getKeyWithCollection(): "ARGS:q", "REQUEST_URI", "TX:score". */
  readonly full: string;
  readonly box: ValueBox;
}

/** A value with nothing computed yet. */
export function newBox(value: string): ValueBox {
  return { v: value, c: undefined, m: -1, same: 0, same2: 0, scanAt: 0, scanEpoch: 0 };
}

/** Whether chain node `node` is known to leave `box.v` as it is (ValueBox.same, same2). */
function knownUnchanged(box: ValueBox, node: number): boolean {
  return node < 32 ? (box.same & (1 << node)) !== 0 : node < 64 && (box.same2 & (1 << (node - 32))) !== 0;
}

/** charMask(box.v), computed once. */
function byteKinds(box: ValueBox): number {
  if (box.m < 0) box.m = charMask(box.v);
  return box.m;
}

/** Records that chain node `node` leaves `box.v` as it is (nodes 64 and up have no bit). */
function markUnchanged(box: ValueBox, node: number): void {
  if (node < 32) box.same |= 1 << node;
  else if (node < 64) box.same2 |= 1 << (node - 32);
}

export function newEntry(key: string, full: string, value: string): Entry {
  return { key, full, box: newBox(value), uk: undefined };
}

export interface DynVar {
  key: string;
  /** The key lower-cased (the collection's own key for it). */
  readonly lowerKey: string;
  value: string;
  /**
   * The value's box and entry, made when a rule reads the variable as a value (dynamicEntry());
   * most TX variables are only compared by TxChecks and read by macros, which need neither.
   * Setting the variable drops both.
   */
  box: ValueBox | undefined;
  entry: Entry | undefined;
}

/** One logged match (ModSecurity's RuleMessage, as pushed to m_rulesMessages). */
export interface LoggedMessage {
  readonly ruleId: number;
  readonly phase: number;
  readonly message: string;
  readonly data: string;
  /** Undefined when the rule has no severity action. */
  readonly severity: number | undefined;
  readonly tags: readonly string[];
  readonly disruptive: boolean;
  /** Key of the last matched value (ARGS:q ...). */
  readonly matchedVar: string | undefined;
}

interface MutableMessage {
  rule: CompiledRule;
  message: string;
  data: string;
  severity: number | undefined;
  tags: string[];
  save: boolean;
  disruptive: boolean;
  matchedVar: string | undefined;
}

export interface Intervention {
  status: number;
  disruptive: boolean;
  url: string | undefined;
  ruleId: number | undefined;
  phase: number | undefined;
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
/** Cells before a prefilter union's bits: the number of values it holds, the phaseRun it is up to date for. */
const UNION_HEADER = 2;
const NONE_ALLOW = 0;
const ALLOW_ALL = 1; // FromNowOnAllowType
const ALLOW_REQUEST = 2; // RequestAllowType
const ALLOW_PHASE = 3; // PhaseAllowType

/**
 * Prefilter buffers (Transaction.unions, scannedBits) of finished transactions, by length, for
 * the next ones: typed arrays of a few KB live outside the V8 heap, and allocating two per
 * request cost more than filling them. Their content is stale: users zero what they take.
 */
const FREE_BUFFERS = new Map<number, Int32Array[]>();
const FREE_BUFFERS_PER_LENGTH = 16;
/** Distinct strings a transaction's first scan buffer holds (it grows past that). */
const SCANNED_STRINGS = 128;

function takeBuffer(length: number): Int32Array {
  let free = FREE_BUFFERS.get(length);
  if (free === undefined && FREE_BUFFERS.size < 8) FREE_BUFFERS.set(length, (free = []));
  return free?.pop() ?? new Int32Array(length);
}

/** Keeps a buffer for reuse if its length is one transactions ask for (not one grown by a large request). */
function giveBuffer(buffer: Int32Array): void {
  const free = FREE_BUFFERS.get(buffer.length);
  if (free !== undefined && free.length < FREE_BUFFERS_PER_LENGTH) free.push(buffer);
}

/** A disposed transaction's collections (frozen: writing to them throws). */
const DISPOSED = Object.freeze([]) as unknown as Entry[];

/** Per-process counter for unique ids when the caller gives none. */
let uniqueCounter = 0;
/** TX keys of the first captures ('0' ... '99'). */
const CAPTURE_KEYS: readonly string[] = Array.from({ length: 100 }, (_, g) => String(g));
/** Last Transaction.scanEpoch given out. */
let scanEpochs = 0;

export class Transaction {
  readonly rs: CompiledRuleSet;
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
  private collections = new Map<string, Map<string, DynVar>>();
  /** The TX collection (also in `collections`). */
  txStore = new Map<string, DynVar>();
  /**
   * TX variables the TxChecks read, by CompiledRuleSet.txKeySlots: each undefined or the one
   * `txStore` holds under that key (a variable keeps its object when set again; a deleted one
   * leaves its slot with it). Saves a TX check (~90 per request) its Map lookup.
   */
  private txSlotVars: (DynVar | undefined)[] = [];
  private matchedVar: string | undefined;
  private matchedVarName: string | undefined;
  /** Reused message of the rule being evaluated (copied when logged). */
  private readonly msg: MutableMessage = { rule: undefined as unknown as CompiledRule, message: '', data: '', severity: undefined, tags: [], save: true, disruptive: false, matchedVar: undefined };
  /** Single variables by slot (singleSlot()): values and their entries (built on first read). */
  private sv: (string | undefined)[] = [];
  private se: (Entry | undefined)[] = [];
  /**
   * Per prefilter source (RulePrefilter.sources): the union of the bits of its first `length`
   * values, in `UNION_HEADER + words` cells from slot * stride: [length, phaseRun when brought
   * up to date, bits...]. One array per transaction (allocated on first use), not one per source.
   */
  private unions: Int32Array | undefined;
  /** Per source: what its union was computed from (its list, or its single entry). */
  private readonly unionSources: (object | undefined)[] = [];
  /** Rule bits of the strings scanned in this transaction, `words` cells each (literalBits()). */
  private scannedBits: Int32Array | undefined;
  private scannedCount = 0;
  /** literalBits() by string: its offset in scannedBits. */
  private scanned = new Map<string, number>();
  /** Tells this transaction's ValueBox.scanAt from others' (and from its own before finish()). */
  private scanEpoch = ++scanEpochs;
  /** READ_FILTERED variables' values by VarRef.cacheSlot, with the length of their list when read. */
  private filteredLists: ({ readonly length: number; readonly entries: Entry[] } | undefined)[] = [];
  /** ARGS_NAMES & co, built from their collection as it grows. */
  private nameLists = new Map<readonly Entry[], Entry[]>();
  private argsCombinedSize = 0;
  /** The XML body's document (XML:/*, XML://@*), when the XML processor built one. */
  xmlDocument: { readonly rootText: string | undefined; readonly attributes: readonly string[] } | undefined;
  private xmlEntryCache: Entry | undefined;

  // --- state ---
  ruleEngine: 'On' | 'Off' | 'DetectionOnly' | undefined;
  requestBodyProcessor: 'XML' | 'JSON' | 'URLENCODED' | undefined;
  /** Set from Content-Type: multipart or urlencoded. */
  requestBodyType: 'MULTIPART' | 'URLENCODED' | undefined;
  requestBodyAccess: boolean | undefined;
  marker: string | undefined;
  skipNext = 0;
  allowType = NONE_ALLOW;
  ruleRemoveById: number[] = [];
  ruleRemoveByIdRange: [number, number][] = [];
  ruleRemoveByTag: string[] = [];
  ruleRemoveTargetById: [number, string][] = [];
  ruleRemoveTargetByTag: [string, string][] = [];
  readonly intervention: Intervention = { status: 200, disruptive: false, url: undefined, ruleId: undefined, phase: undefined };
  readonly messages: LoggedMessage[] = [];
  highestSeverity = 255;
  private readonly started = process.hrtime.bigint();
  private currentPhase = 0;
  /**
   * Counts evaluatePhase() calls and single variables set (a list or a single variable read in
   * one is up to date for the rest of it).
   */
  private phaseRun = 0;

  constructor(rs: CompiledRuleSet, id?: string) {
    this.rs = rs;
    this.collections.set('TX', this.txStore);
    this.sv[URLENCODED_ERROR_SLOT] = '0';
    this.uniqueId = id;
  }

  get id(): string {
    return (this.uniqueId ??= `${Date.now().toString(16)}${(++uniqueCounter).toString(16).padStart(8, '0')}`);
  }

  /** A single variable's value when none was set: UNIQUE_ID is made on demand. */
  private unsetSingle(slot: number): string {
    return slot === UNIQUE_ID_SLOT ? this.id : '';
  }

  // ------------------------------------------------------------------ collections

  /** TX, IP, GLOBAL ... (created on first use). */
  collection(name: string): Map<string, DynVar> {
    let c = this.collections.get(name);
    if (!c) {
      c = new Map();
      this.collections.set(name, c);
    }
    return c;
  }

  /** storeOrUpdateFirst on a dynamic collection. */
  store(collection: string, key: string, value: string): void {
    this.storeIn(this.collection(collection), key, lowerAscii(key), value);
  }

  /** store() with the collection and the lower-cased key at hand. */
  private storeIn(c: Map<string, DynVar>, key: string, lk: string, value: string): void {
    const v = c.get(lk);
    if (v) {
      v.value = value;
      v.box = undefined;
      v.entry = undefined;
    } else c.set(lk, { key, lowerKey: lk, value, box: undefined, entry: undefined });
  }

  setTx(key: string, value: string): void {
    this.storeIn(this.txStore, key, lowerAscii(key), value);
  }

  /** TX.n of a capture (operators with `capture`): the keys are digits, no case to fold. */
  setCapture(group: number, value: string): void {
    const key = group < CAPTURE_KEYS.length ? CAPTURE_KEYS[group]! : String(group);
    this.storeIn(this.txStore, key, key, value);
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

  /** The list collection LIST_COLLECTIONS[index]. */
  listAt(index: number): Entry[] {
    switch (index) {
      case 0: return this.args;
      case 1: return this.argsGet;
      case 2: return this.argsPost;
      case 3: return this.requestHeaders;
      case 4: return this.requestHeadersNames;
      case 5: return this.requestCookies;
      case 6: return this.requestCookiesNames;
      case 7: return this.files;
      case 8: return this.filesNames;
      case 9: return this.filesSizes;
      case 10: return this.filesTmpNames;
      case 11: return this.filesTmpContent;
      case 12: return this.multipartFilename;
      case 13: return this.multipartName;
      case 14: return this.multipartPartHeaders;
      case 15: return this.matchedList(false);
      case 16: return this.matchedList(true);
      case 17: return this.responseHeaders;
      case 18: return this.responseHeadersNames;
      case 19: return this.geo;
      default: throw new Error(`no list collection ${index}`);
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
  private singleValue(slot: number, name: string): string {
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

  ruleValue(rule: CompiledRule | undefined, what: string): string | undefined {
    let r = rule;
    switch (what) {
      case 'id':
        while (r && r.id === 0) r = r.parent;
        return r && r.id !== 0 ? String(r.id) : undefined;
      case 'rev':
        if (!rule) return undefined;
        while (r && r.rev === '') r = r.parent;
        return r ? r.rev : undefined;
      case 'severity':
        if (!rule) return undefined;
        while (r && r.severity === undefined) r = r.parent;
        return r && r.severity !== undefined ? String(r.severity) : undefined;
      case 'logdata':
        if (!rule) return undefined;
        while (r && r.logdata === undefined) r = r.parent;
        return r && r.logdata ? this.expand(r.logdata, undefined) : undefined;
      case 'msg':
        if (!rule) return undefined;
        while (r && r.msg === undefined) r = r.parent;
        return r && r.msg ? this.expand(r.msg, undefined) : undefined;
      case 'ver':
        if (!rule) return undefined;
        while (r && r.ver === '') r = r.parent;
        return r ? r.ver : undefined;
      default:
        return undefined;
    }
  }

  /** Adds a request argument (ModSecurity's Transaction::addArgument). */
  addArgument(origin: 'GET' | 'POST' | 'JSON', key: string, value: string): boolean {
    const limit = this.rs.config.argumentsLimit;
    if (limit !== undefined && this.args.length >= limit) return false;
    const box: ValueBox = newBox(value);
    this.args.push({ key, full: `ARGS:${key}`, box, uk: undefined });
    if (origin === 'GET') this.argsGet.push({ key, full: `ARGS_GET:${key}`, box, uk: undefined });
    else if (origin === 'POST') this.argsPost.push({ key, full: `ARGS_POST:${key}`, box, uk: undefined });
    this.argsCombinedSize += key.length + value.length;
    this.setSingle('ARGS_COMBINED_SIZE', String(this.argsCombinedSize));
    return true;
  }

  // ------------------------------------------------------------------ macros

  expand(e: Expand, rule: CompiledRule | undefined): string {
    if (e.text !== undefined) return e.text;
    let out = '';
    for (const part of e.parts!) {
      if (typeof part === 'string') {
        out += part;
        continue;
      }
      // %{tx.x} and %{REQUEST_URI}-like macros read directly (the CRS's setvars are full of them)
      const direct = part.resolver.direct;
      if (direct !== undefined && direct.kind === READ_TX_KEY) {
        const v = this.txStore.get(direct.lowerKey);
        if (v !== undefined) out += v.value;
        continue;
      }
      if (direct !== undefined && direct.kind === READ_SINGLE) {
        out += this.singleValue(direct.slot, direct.name);
        continue;
      }
      const values: Entry[] = [];
      part.resolver.resolve(this, rule, values);
      if (values.length > 0) out += values[0]!.box.v;
    }
    return out;
  }

  // ------------------------------------------------------------------ transformations

  /** The value of `box` after the chain ending at trie node `node` (cached). */
  transformed(box: ValueBox, node: number): string {
    if (node === 0 || knownUnchanged(box, node)) return box.v;
    const t = this.rs.transformations[node]!;
    const chain = t.chainChangesOn;
    if (chain >= 0) {
      // none of the value's bytes would make any step of the chain change it: no step to run or look up
      if ((byteKinds(box) & chain) === 0) {
        markUnchanged(box, node);
        return box.v;
      }
    }
    const c = box.c;
    if (c !== undefined) {
      for (let k = 0; k < c.length; k += 2) if (c[k] === node) return c[k + 1] as string;
    }
    const input = t.parent === 0 ? box.v : this.transformed(box, t.parent);
    let out: string;
    if (input === box.v && t.changesOn >= 0) {
      // the value as it came (most chains leave it so): none of its bytes would change it
      out = (byteKinds(box) & t.changesOn) === 0 ? input : t.fn(input);
    } else out = t.fn(input);
    // a bit, not a cache array: a benign value (or an open transaction's) then needs none
    if (out === box.v && node < 64) markUnchanged(box, node);
    else if (box.c === undefined) box.c = [node, out];
    else box.c.push(node, out); // (the parent's results may have created it since `c` was read)
    return out;
  }

  // ------------------------------------------------------------------ phases

  engineState(): 'On' | 'Off' | 'DetectionOnly' {
    return this.ruleEngine ?? this.rs.config.ruleEngine;
  }

  /** RulesSet::evaluate for one phase (0-5). */
  evaluatePhase(phase: number): void {
    this.currentPhase = phase;
    this.phaseRun++;
    if (this.allowType === ALLOW_ALL && phase !== 5) return;
    if (this.allowType === ALLOW_REQUEST && phase <= 2) return;
    this.allowType = NONE_ALLOW;
    const list = this.rs.phases[phase]!;
    const markerIndex = this.rs.markerIndex[phase]!;
    const rs = this.rs;
    const { at: prefilterAt, records } = rs.phasePrefilters[phase]!;
    const txChecks = rs.phaseTxChecks[phase]!;
    const rules = rs.phaseRules[phase]!;
    const markers = rs.phaseMarkers[phase]!;
    for (let i = 0; i < list.length; i++) {
      const record = prefilterAt[i]!;
      if (record >= 0 && this.runsAsItComes()) {
        // a rule that cannot match: its effect (MATCHED_VARS cleared), decided from its record alone
        if (!this.sourcesMayMatch(records, record + 3, records[record + 2]!, records[record]!, records[record + 1]!, rules[i]!)) {
          this.cleanMatchedVars();
          continue;
        }
      }
      const check = txChecks[i];
      if (check !== undefined && this.runsAsItComes() && !this.removesTargets()) {
        // a TxCheck (about 90 per request), from its record: its entry and rule are not read
        this.evaluateTxCheck(check);
        if (this.intervention.disruptive) break;
        if (this.marker !== undefined && this.marker === check.skipMarker) i = check.skipTarget - 1;
        continue;
      }
      const marker = markers[i];
      if (this.marker !== undefined) {
        if (marker === undefined) {
          // jump to the next occurrence of the marker in this phase (or past the end)
          const idx = markerIndex.get(this.marker);
          let next = list.length;
          if (idx) {
            for (const k of idx) {
              if (k > i) {
                next = k;
                break;
              }
            }
          }
          i = next - 1;
          continue;
        }
        if (marker === this.marker) this.marker = undefined;
        continue;
      }
      if (marker !== undefined) continue;
      const rule = rules[i]!;
      if (this.skipNext > 0) {
        this.skipNext--;
        continue;
      }
      if (this.allowType !== NONE_ALLOW) continue;
      if (rs.removesRules && this.removedByConfig(rule)) continue;
      if (this.ruleRemoveByTag.length > 0 && this.hasTag(rule, this.ruleRemoveByTag)) continue;
      if (rule.type === 'action') this.evaluateUnconditional(rule);
      else if (rule.txCheck !== undefined && !this.removesTargets()) this.evaluateTxCheck(rule.txCheck);
      else this.evaluateRule(rule, this.newMessage(rule));
      if (this.intervention.disruptive) break;
      // the rule's own skipAfter: on to its marker (whose entry then clears it)
      if (this.marker !== undefined && this.marker === rule.skipMarker) i = rule.skipTarget - 1;
    }
  }

  /** SecRuleRemoveById / ByTag / ByMsg. */
  private removedByConfig(rule: CompiledRule): boolean {
    const rs = this.rs;
    if (rs.removedIds.has(rule.id)) return true;
    if (rs.removedRanges.some(([a, b]) => rule.id >= a && rule.id <= b)) return true;
    if (rs.removedMsgs.length > 0 && rule.msg && rs.removedMsgs.includes(this.expand(rule.msg, undefined))) return true;
    return rs.removedTags.length > 0 && this.hasTag(rule, rs.removedTags);
  }

  private hasTag(rule: CompiledRule, tags: readonly string[]): boolean {
    for (const t of rule.tags) {
      const name = this.expand(t, undefined);
      if (tags.includes(name)) return true;
    }
    return false;
  }

  private newMessage(rule: CompiledRule): MutableMessage {
    const m = this.msg;
    m.rule = rule;
    m.message = '';
    m.data = '';
    m.severity = undefined;
    if (m.tags.length > 0) m.tags = [];
    m.save = true;
    m.disruptive = false;
    m.matchedVar = undefined;
    return m;
  }

  private pushMessage(m: MutableMessage): void {
    this.messages.push({
      ruleId: m.rule.id,
      phase: m.rule.phase,
      message: m.message,
      data: m.data,
      severity: m.rule.severity !== undefined ? (m.severity ?? 0) : undefined,
      tags: m.tags,
      disruptive: m.disruptive,
      matchedVar: m.matchedVar,
    });
    // the message keeps the list; later tags (a chain's, a multiMatch rule's) go to a new one
    m.tags = [];
  }

  /** RuleUnconditional::evaluate (SecAction). */
  private evaluateUnconditional(rule: CompiledRule): void {
    const msg = this.newMessage(rule);
    for (const sv of rule.setvars) this.setVar(sv, rule);
    this.actionsAfterFullMatch(rule, msg);
    // performLogging(lastLog = true, chainedParentNull = false)
    if (rule.hasBlock && !rule.multiMatch) this.pushMessage(msg);
    else if (msg.save && !rule.multiMatch && msg.message !== '') this.pushMessage(msg);
  }

  /** Internal (generated code). */
  isRemovedTarget(rule: CompiledRule, name: string): boolean {
    for (const [id, target] of this.ruleRemoveTargetById) if (id === rule.id && target === name) return true;
    if (this.ruleRemoveTargetByTag.length > 0) {
      for (const [tag, target] of this.ruleRemoveTargetByTag) {
        if (target === name && this.hasTag(rule, [tag])) return true;
      }
    }
    return false;
  }

  private excludedByUpdate(rule: CompiledRule, e: Entry): boolean {
    for (const x of rule.exclusions) {
      if (x.re !== undefined) {
        if (x.re.test(e.key)) return true;
      } else if (x.fullName === e.full) return true;
    }
    return false;
  }

  /** Removed by ctl:ruleRemoveById (or the per-proxy exclusions): a removed rule counts as matched and does nothing. */
  private removedById(rule: CompiledRule): boolean {
    if (this.ruleRemoveById.length > 0 && this.ruleRemoveById.includes(rule.id)) return true;
    if (this.ruleRemoveByIdRange.length > 0) {
      for (const [a, b] of this.ruleRemoveByIdRange) if (a <= rule.id && b >= rule.id) return true;
    }
    return false;
  }

  /** RuleWithOperator::evaluate. Returns whether the rule (and its chain) matched. */
  private evaluateRule(rule: CompiledRule, msg: MutableMessage): boolean {
    if (this.removedById(rule)) return true;
    const globalRet = this.scan(rule, msg);
    if (!globalRet) {
      this.cleanMatchedVars();
      return false;
    }
    if (rule.chained) {
      const child = rule.child;
      if (child === undefined) return false;
      if (!this.evaluateRule(child, msg)) return false;
    }
    this.actionsAfterFullMatch(rule, msg);
    // performLogging(lastLog = true, chainedParentNull = true)
    if (msg.save && rule.parent === undefined && !rule.multiMatch) this.pushMessage(msg);
    return true;
  }

  /**
   * evaluateRule for a TxCheck rule (program.ts), with the same effects: the operator on the TX
   * value, then MATCHED_VAR*, the setvars, the jump and `pass`; or MATCHED_VARS cleared.
   */
  private evaluateTxCheck(check: TxCheck): void {
    const rule = check.rule;
    if (this.removedById(rule)) return;
    let v = this.txSlotVars[check.slot];
    if (v === undefined) {
      v = this.txStore.get(check.lowerKey);
      if (v !== undefined) this.txSlotVars[check.slot] = v;
    }
    let matched: boolean;
    if (check.count) {
      matched = this.txCheckValue(check, v !== undefined ? '1' : '0', check.matchedName);
      if (check.valueName !== undefined) {
        // the value as it is after the count's setvars (the general loop resolves it then)
        if (check.hasSetvars) v = this.txStore.get(check.lowerKey);
        if (v !== undefined && this.txCheckValue(check, v.value, check.valueName)) matched = true;
      }
    } else matched = v !== undefined && this.txCheckValue(check, v.value, check.matchedName);
    if (!matched) {
      this.cleanMatchedVars();
      return;
    }
    if (check.skipMarker !== undefined) this.marker = check.skipMarker;
    if (check.pass && this.engineState() === 'On') this.passIntervention();
  }

  /** One value of a TxCheck: the operator, and on a match MATCHED_VAR* and the rule's setvars. */
  private txCheckValue(check: TxCheck, value: string, name: string): boolean {
    const rule = check.rule;
    const passes = check.numeric !== 0 ? compareNumeric(check.numeric, check.operand, value) : this.runOperator(rule, rule.operator!, value);
    if (passes === check.negated) return false;
    this.matchedVar = value;
    this.matchedVarName = name;
    this.addMatched(name, value);
    if (check.hasSetvars) for (const sv of rule.setvars) this.setVar(sv, rule);
    return true;
  }

  /** The variables and the operator of a rule: true when some value matched. */
  private scan(rule: CompiledRule, msg: MutableMessage): boolean {
    // no value holds a literal the operator needs: the rule cannot match (exclusions only remove values)
    if (rule.prefilter !== undefined && !this.someMayMatch(rule, rule.prefilter)) return false;
    const removals = this.removesTargets();
    const hasExclusions = rule.exclusions.length > 0;
    let globalRet = false;
    const refs = rule.refs;
    for (let vi = 0; vi < refs.length; vi++) {
      const ref = refs[vi]!;
      if (hasExclusions && ref.own && rule.exclusions.some((x) => x.fullName === ref.fullName)) continue;
      if (removals && this.isRemovedTarget(rule, ref.fullName)) continue;
      let list: readonly Entry[];
      switch (ref.kind) {
        case READ_SINGLE:
          if (this.checkEntry(rule, msg, this.singleAt(ref.index, ref.name), hasExclusions, removals)) globalRet = true;
          continue;
        case READ_TX_KEY: {
          const v = this.txStore.get(ref.name);
          if (v !== undefined && this.checkEntry(rule, msg, this.dynamicEntry('TX', ref.key, v), hasExclusions, removals)) globalRet = true;
          continue;
        }
        case READ_LIST:
        case READ_NAMES:
        case READ_FILTERED:
          list = this.listRead(ref, rule);
          break;
        case READ_XML:
          if (this.xmlDocument === undefined) continue;
          list = this.resolved(ref, rule);
          break;
        default: {
          // &TX:name among other variables (the CRS's "exclusions for this application?" checks):
          // its constant entry, without a list
          const counted = ref.resolver.countEntries;
          if (counted !== undefined) {
            const entry = counted[this.txStore.has(ref.resolver.countedTxKey!) ? 1 : 0];
            if (this.checkEntry(rule, msg, entry, hasExclusions, removals)) globalRet = true;
            continue;
          }
          list = this.resolved(ref, rule);
        }
      }
      const count = list.length;
      for (let k = 0; k < count; k++) {
        if (this.checkEntry(rule, msg, list[k]!, hasExclusions, removals)) globalRet = true;
      }
    }
    return globalRet;
  }

  /**
   * READ_LIST, READ_NAMES, READ_FILTERED: the list, read in place (a snapshot of its length, as
   * ModSecurity copies it).
   */
  private listRead(ref: VarRef, rule: CompiledRule): readonly Entry[] {
    if (ref.kind === READ_LIST) return this.listAt(ref.index);
    if (ref.kind === READ_NAMES) return this.namesOf(ref.name, this.listAt(ref.index));
    const length = this.listAt(ref.index).length;
    let cached = this.filteredLists[ref.cacheSlot];
    if (cached === undefined || cached.length !== length) {
      cached = { length, entries: this.resolved(ref, rule) };
      this.filteredLists[ref.cacheSlot] = cached;
    }
    return cached.entries;
  }

  /**
   * Whether some value of the rule's variables contains a literal its operator needs. Each
   * variable answers from the union of its values' prefilter bits, kept per source (variable and
   * chain node) and extended as a list grows, so a rule that cannot match costs a few reads
   * instead of one operator run per value.
   */
  private someMayMatch(rule: CompiledRule, prefilter: RulePrefilter): boolean {
    return this.sourcesMayMatch(prefilter.sources, 0, prefilter.sources.length, prefilter.word, prefilter.mask, rule);
  }

  /** Whether the rule set or the transaction removes rules (then each rule is looked at as evaluatePhase does). */
  private removesAnyRule(): boolean {
    return this.rs.removesRules || this.ruleRemoveByTag.length > 0 || this.ruleRemoveById.length > 0 || this.ruleRemoveByIdRange.length > 0;
  }

  /**
   * No jump or skip pending, nothing allowed, no rule removed: the next rule runs as it comes, so
   * the loop may decide it from its prefilter record or run it from its TxCheck record.
   */
  private runsAsItComes(): boolean {
    return this.marker === undefined && this.skipNext === 0 && this.allowType === NONE_ALLOW && !this.removesAnyRule();
  }

  /** Whether ctl:ruleRemoveTargetById/ByTag took variables from some rules in this transaction. */
  private removesTargets(): boolean {
    return this.ruleRemoveTargetById.length > 0 || this.ruleRemoveTargetByTag.length > 0;
  }

  /**
   * someMayMatch() on `count` sources from slots[from] (RulePrefilter.sources, or a PhasePrefilters
   * record). A union already up to date for this phase (most reads) is read without a call, and
   * without touching the rule's objects.
   */
  private sourcesMayMatch(slots: Int32Array, from: number, count: number, word: number, mask: number, rule: CompiledRule): boolean {
    const all = this.rs.prefilter;
    const stride = all.scanner.words + UNION_HEADER;
    const phaseRun = this.phaseRun;
    for (let vi = 0; vi < count; vi++) {
      const slot = slots[from + vi]!;
      if (slot < 0) {
        // an XML read
        if (this.xmlDocument === undefined) continue;
        return true;
      }
      let at = slot * stride;
      const unions = this.unions;
      if (unions !== undefined && unions[at + 1] === phaseRun && all.changing[slot] === 0 && this.unionSources[slot] !== undefined) at += UNION_HEADER;
      else at = this.sourceBits(slot, rule.refs[vi]!, rule);
      if ((this.unions![at + word]! & mask) !== 0) return true;
    }
    return false;
  }

  /** The union of the prefilter bits of a source's values (read through `ref`): its offset in `unions`. */
  private sourceBits(slot: number, ref: VarRef, rule: CompiledRule): number {
    const prefilter = this.rs.prefilter;
    const words = prefilter.scanner.words;
    const stride = words + UNION_HEADER;
    const unions = (this.unions ??= takeBuffer(prefilter.nodes.length * stride));
    const at = slot * stride;
    const source = this.unionSources[slot];
    if (source !== undefined && unions[at + 1] === this.phaseRun && prefilter.changing[slot] === 0) return at + UNION_HEADER;
    const node = prefilter.nodes[slot]!;
    if (ref.kind === READ_SINGLE) {
      const entry = this.singleAt(ref.index, ref.name);
      if (source !== entry) {
        this.unionSources[slot] = entry;
        const found = this.boxBits(entry.box, node);
        const scanned = this.scannedBits!;
        for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w] = scanned[found + w]!;
      }
      unions[at + 1] = this.phaseRun;
      return at + UNION_HEADER;
    }
    const raw = prefilter.rawOf[slot]!;
    const chain = prefilter.chainMask[slot]!;
    // values without a byte that would make the chain change them have their raw bits
    const rawAt = raw !== slot && chain >= 0 ? this.sourceBits(raw, ref, rule) : -1;
    const list = this.listRead(ref, rule);
    if (source !== list) {
      // the buffer may come from a finished transaction (or the source held another list)
      for (let k = at; k < at + stride; k++) unions[k] = 0;
      this.unionSources[slot] = list;
    }
    if (rawAt >= 0) {
      // the raw bits of every value, then the bits of those the chain changes
      for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w]! |= unions[rawAt + w]!;
      for (let k = unions[at]!; k < list.length; k++) {
        const box = list[k]!.box;
        if ((box.m & chain) === 0) continue;
        const found = this.boxBits(box, node);
        const scanned = this.scannedBits!;
        for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w]! |= scanned[found + w]!;
      }
    } else {
      const isRaw = raw === slot;
      for (let k = unions[at]!; k < list.length; k++) {
        const box = list[k]!.box;
        const found = this.boxBits(box, node);
        const scanned = this.scannedBits!;
        for (let w = 0; w < words; w++) unions[at + UNION_HEADER + w]! |= scanned[found + w]!;
        // the sources reading this list through a chain tell the values it leaves alone by their bytes
        if (isRaw) byteKinds(box);
      }
    }
    unions[at] = list.length;
    unions[at + 1] = this.phaseRun;
    return at + UNION_HEADER;
  }

  /** literalBits() of the value of `box` after chain node `node`. */
  private boxBits(box: ValueBox, node: number): number {
    const value = this.transformed(box, node);
    if (value !== box.v) return this.literalBits(value);
    if (box.scanEpoch === this.scanEpoch) return box.scanAt;
    const at = this.literalBits(value);
    box.scanAt = at;
    box.scanEpoch = this.scanEpoch;
    return at;
  }

  /**
   * The bits of the rules with a literal in `value` (their offset in scannedBits), scanned once
   * per distinct string: most transformation chains leave a benign value as it is, so the same
   * string comes back under many sources. Kept for this transaction only.
   */
  private literalBits(value: string): number {
    let offset = this.scanned.get(value);
    if (offset === undefined) {
      const scanner = this.rs.prefilter.scanner;
      const words = scanner.words;
      offset = this.scannedCount * words;
      let pool = this.scannedBits;
      if (pool === undefined) pool = this.scannedBits = takeBuffer(SCANNED_STRINGS * words);
      else if (pool.length < offset + words) {
        const grown = new Int32Array(2 * (offset + words));
        grown.set(pool);
        pool = this.scannedBits = grown;
      }
      for (let w = 0; w < words; w++) pool[offset + w] = 0;
      scanner.scan(value, pool, offset);
      this.scannedCount++;
      this.scanned.set(value, offset);
    }
    return offset;
  }

  private resolved(ref: VarRef, rule: CompiledRule): Entry[] {
    const values: Entry[] = [];
    ref.resolver.resolve(this, rule, values);
    return values;
  }

  /** The operator on one value (each changed transformation result with multiMatch). */
  private checkEntry(rule: CompiledRule, msg: MutableMessage, entry: Entry, hasExclusions: boolean, removals: boolean): boolean {
    if (hasExclusions && this.excludedByUpdate(rule, entry)) return false;
    if (removals && this.isRemovedTarget(rule, entry.full)) return false;
    const op = rule.operator!;
    let matched = false;
    if (!rule.multiMatch) {
      // the union of the variable's values let the rule through; this value may lack the literals
      const prefilter = rule.prefilter;
      if (prefilter !== undefined) {
        const at = this.boxBits(entry.box, prefilter.node);
        if ((this.scannedBits![at + prefilter.word]! & prefilter.mask) === 0) return false;
      }
      const value = this.transformed(entry.box, rule.tnode);
      if (this.runOperator(rule, op, value) !== op.negated) {
        this.onMatch(rule, msg, entry, value);
        matched = true;
      }
      return matched;
    }
    // a value no step can give a gate literal: no match at any step (CompiledRule.gateKinds)
    if (rule.gateKinds >= 0 && (byteKinds(entry.box) & rule.gateKinds) === 0 && !containsAny(entry.box.v, op.gate!)) return false;
    // the original value, then each transformation result that changed the value
    let prev = entry.box.v;
    if (this.runOperator(rule, op, prev) !== op.negated) {
      this.onMatch(rule, msg, entry, prev);
      matched = true;
    }
    for (const node of rule.tpath) {
      const value = this.transformed(entry.box, node);
      if (value === prev) continue;
      prev = value;
      if (this.runOperator(rule, op, value) !== op.negated) {
        this.onMatch(rule, msg, entry, value);
        matched = true;
      }
    }
    return matched;
  }

  /** op.run(), with the commonest operators run here (CompiledOperator.numeric, .rx). */
  private runOperator(rule: CompiledRule, op: CompiledOperator, value: string): boolean {
    if (op.numeric !== 0) return compareNumeric(op.numeric, op.operand, value);
    const re = op.rx;
    if (re === undefined) return op.run(this, rule, value);
    return runRegex(this, rule, re, op.gate, value);
  }

  /** A value matched (ModSecurity's updateMatchedVars + independent actions + per-match logging). Internal. */
  onMatch(rule: CompiledRule, msg: MutableMessage, entry: Entry, value: string): void {
    // updateMatchedVars
    const key = entry.full;
    this.matchedVar = value;
    this.matchedVarName = key;
    this.addMatched(key, value);
    msg.matchedVar = key;
    // executeActionsIndependentOfChainedRuleResult
    for (const sv of rule.setvars) this.setVar(sv, rule);
    if (rule.multiMatch && !rule.chained) {
      if (rule.severity !== undefined) this.applySeverity(rule, msg);
      if (rule.logdata) msg.data = this.expand(rule.logdata, undefined);
      if (rule.msg) msg.message = this.expand(rule.msg, undefined);
    }
    // performLogging(lastLog = false)
    if (rule.multiMatch && msg.save) this.pushMessage(msg);
  }

  private addMatched(key: string, value: string): void {
    this.matchedKeys[this.matchedCount] = key;
    this.matchedValues[this.matchedCount] = value;
    this.matchedCount++;
  }

  private cleanMatchedVars(): void {
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

  private applySeverity(rule: CompiledRule, msg: MutableMessage): void {
    msg.severity = rule.severity;
    if (rule.severity !== undefined && this.highestSeverity > rule.severity) this.highestSeverity = rule.severity;
  }

  /** RuleWithActions::executeActionsAfterFullMatch. */
  private actionsAfterFullMatch(rule: CompiledRule, msg: MutableMessage): void {
    const defaults = this.rs.defaults[rule.phase];
    if (defaults) for (const a of defaults.runtime) this.runAction(a, rule, msg);
    if (rule.staticTags !== undefined && msg.tags.length === 0) msg.tags = rule.staticTags.slice();
    else for (const t of rule.tags) msg.tags.push(this.expand(t, undefined));
    if (rule.severity !== undefined) this.applySeverity(rule, msg);
    if (rule.logdata) msg.data = this.expand(rule.logdata, undefined);
    if (rule.msg) msg.message = this.expand(rule.msg, undefined);
    for (const a of rule.runtime) this.runAction(a, rule, msg);
    if (rule.disruptive !== undefined && this.engineState() === 'On') this.runDisruptive(rule.disruptive, rule, msg);
  }

  private runAction(a: RuntimeAction, rule: CompiledRule, msg: MutableMessage): void {
    switch (a.kind) {
      case 'log':
      case 'auditlog':
        msg.save = true;
        return;
      case 'nolog':
      case 'noauditlog':
        msg.save = false;
        return;
      case 'block': {
        if (this.engineState() !== 'On') return;
        const ds = this.rs.defaults[rule.phase]?.disruptive;
        if (ds !== undefined) for (const d of ds) this.runDisruptive(d, rule, msg);
        return;
      }
      case 'skipAfter':
        this.marker = a.marker;
        return;
      case 'skip':
        this.skipNext = a.count;
        return;
      case 'status':
        this.intervention.status = a.status;
        return;
      case 'ctl':
        this.runCtl(a.ctl);
        return;
      case 'initcol':
        this.expand(a.value, rule);
        return;
      case 'setenv': {
        const name = this.expand(a.name, rule);
        if (a.unset) this.env.delete(name);
        else this.env.set(name, a.value ? this.expand(a.value, rule) : '1');
        return;
      }
      case 'noop':
        return;
    }
  }

  private runDisruptive(d: DisruptiveAction, rule: CompiledRule, msg: MutableMessage): void {
    const top = this.topRule(rule);
    switch (d.kind) {
      case 'deny':
      case 'drop':
        if (this.intervention.status === 200) this.intervention.status = 403;
        this.intervention.disruptive = true;
        this.intervention.ruleId = top.id;
        this.intervention.phase = top.phase;
        msg.disruptive = true;
        return;
      case 'redirect':
        if (this.intervention.status === 200 || this.intervention.status < 300 || this.intervention.status > 399) this.intervention.status = 302;
        this.intervention.url = this.expand(d.url, rule);
        this.intervention.disruptive = true;
        this.intervention.ruleId = top.id;
        this.intervention.phase = top.phase;
        msg.disruptive = true;
        return;
      case 'pass':
        this.passIntervention();
        return;
      case 'allow':
        this.allowType = d.scope === 'request' ? ALLOW_REQUEST : d.scope === 'phase' ? ALLOW_PHASE : ALLOW_ALL;
        return;
    }
  }

  /** `pass`: a pending intervention is cleared. */
  private passIntervention(): void {
    this.intervention.status = 200;
    this.intervention.disruptive = false;
    this.intervention.url = undefined;
    this.intervention.ruleId = undefined;
    this.intervention.phase = undefined;
  }

  private topRule(rule: CompiledRule): CompiledRule {
    let r = rule;
    while (r.parent) r = r.parent;
    return r;
  }

  private runCtl(c: CtlAction): void {
    switch (c.kind) {
      case 'ruleRemoveById':
        for (const id of c.ids) this.ruleRemoveById.push(id);
        for (const r of c.ranges) this.ruleRemoveByIdRange.push([r[0], r[1]]);
        return;
      case 'ruleRemoveByTag':
        this.ruleRemoveByTag.push(c.tag);
        return;
      case 'ruleRemoveTargetById':
        this.ruleRemoveTargetById.push([c.id, c.target]);
        return;
      case 'ruleRemoveTargetByTag':
        this.ruleRemoveTargetByTag.push([c.tag, c.target]);
        return;
      case 'ruleEngine':
        this.ruleEngine = c.value;
        return;
      case 'requestBodyAccess':
        this.requestBodyAccess = c.value;
        return;
      case 'requestBodyProcessor':
        if (c.value === 'URLENCODED') this.requestBodyType = 'URLENCODED';
        else this.requestBodyProcessor = c.value;
        this.setSingle('REQBODY_PROCESSOR', c.value);
        return;
      default:
        return;
    }
  }

  /** SetVar::evaluate. */
  setVar(sv: SetVarAction, rule: CompiledRule): void {
    const pre = sv.value ? this.expand(sv.value, rule) : '';
    const name = this.expand(sv.name, rule);
    const lk = sv.lowerName ?? lowerAscii(name);
    const coll = sv.collection === 'TX' ? this.txStore : this.collection(sv.collection);
    switch (sv.op) {
      case 'unset': {
        if (coll.delete(lk) && coll === this.txStore) {
          const slot = this.rs.txKeySlots.get(lk);
          if (slot !== undefined) this.txSlotVars[slot] = undefined;
        }
        return;
      }
      case 'set':
        this.storeIn(coll, name, lk, pre);
        return;
      case 'one':
        this.storeIn(coll, name, lk, '1');
        return;
      default: {
        const p = stoi(pre);
        const cur = coll.get(lk);
        const value = cur ? stoi(cur.value) : 0;
        this.storeIn(coll, name, lk, String(sv.op === 'add' ? value + p : value - p));
      }
    }
  }

  /**
   * The transaction is over (after the logging phase): its prefilter buffers go back for the
   * next transactions. Evaluating more would start them afresh.
   */
  finish(): void {
    if (this.unions !== undefined) giveBuffer(this.unions);
    if (this.scannedBits !== undefined) giveBuffer(this.scannedBits);
    this.unions = undefined;
    this.scannedBits = undefined;
    this.unionSources.length = 0;
    if (this.scanned.size > 0) this.scanned = new Map();
    this.scannedCount = 0;
    this.scanEpoch = ++scanEpochs;
  }

  /**
   * Lets go of everything the transaction holds, once its results are read (the inspector's last
   * step for an exchange that was held open): its collections, caches and messages. A transaction held open while the origin answers
   * can end up in V8's old generation, and a dead old object still pointing at young ones keeps
   * them alive through every scavenge until the next full collection. Measured in the WAF worker
   * with 16 exchanges open, 20,000 exchanges: 455 MB survived the scavenges without this, 53-72 MB
   * with it (GC pauses 584 -> ~175 ms). The transaction is not to be used afterwards (its list
   * collections are frozen: adding to them throws).
   */
  dispose(): void {
    this.finish();
    this.args = this.argsGet = this.argsPost = DISPOSED;
    this.requestHeaders = this.requestHeadersNames = this.requestCookies = this.requestCookiesNames = DISPOSED;
    this.files = this.filesNames = this.filesSizes = this.filesTmpNames = this.filesTmpContent = DISPOSED;
    this.multipartFilename = this.multipartName = this.multipartPartHeaders = DISPOSED;
    this.matchedVars = this.matchedVarsNames = this.responseHeaders = this.responseHeadersNames = this.geo = DISPOSED;
    this.matchedKeys.length = this.matchedValues.length = this.matchedCount = 0;
    this.matchedVar = this.matchedVarName = undefined;
    // new empty containers rather than clear(): V8 gives an old Map's cleared table old memory
    this.env = new Map();
    this.collections = new Map();
    this.txStore = new Map();
    this.txSlotVars = [];
    this.sv = [];
    this.se = [];
    this.filteredLists = [];
    this.nameLists = new Map();
    this.xmlDocument = this.xmlEntryCache = undefined;
    this.msg.tags = [];
    this.messages.length = 0;
  }

  /** Reads and clears the pending intervention (what the addon's intervention() does). */
  takeIntervention(): Intervention | undefined {
    const it = this.intervention;
    if (!it.disruptive) return undefined;
    const copy = { ...it };
    it.status = 200;
    it.disruptive = false;
    it.url = undefined;
    it.ruleId = undefined;
    it.phase = undefined;
    return copy;
  }

  get phase(): number {
    return this.currentPhase;
  }
}
