/**
 * The compiled form of a SecLang rule set: what the parser's directives become once, at load
 * time, and what every transaction then runs. Nothing here holds per-request state; a
 * CompiledRuleSet is immutable after compile() and shared by every proxy (per-proxy paranoia,
 * threshold and exclusions are transaction data, see transaction.ts).
 *
 * The types mirror ModSecurity v3's model closely on purpose (RuleWithOperator, RuleUnconditional,
 * RuleMarker, the action kinds and their execution order), because the verdicts must be the same.
 */
import type { LiteralPrefilters, PhasePrefilters, RulePrefilter } from '../prefilter/scanner.ts';
import type { CompiledRegex } from '../regex/runtime.ts';
import type { TransformationNode } from '../transformations/trie.ts';
import type { TransactionCollections } from '../transaction/collections.ts';
import type { Entry } from '../transaction/value-cache.ts';
import type { EngineConfig } from './engine-config.ts';

/** A string with %{...} macros, compiled. `text` when it has none. */
export interface Expand {
  readonly text?: string;
  readonly parts?: readonly (string | MacroVar)[];
}

export interface MacroVar {
  readonly resolver: VarResolver;
}

/** Resolves one variable of a rule (ARGS, ARGS:foo, ARGS:/re/, TX:score, &ARGS, REQUEST_URI ...). */
export interface VarResolver {
  /** ModSecurity's m_fullName: "ARGS", "ARGS:foo", "ARGS:regex(^re)", "TX:score". Used by exclusions. */
  readonly fullName: string;
  /** Upper-case collection name. */
  readonly collection: string;
  /** Dict element (as written), if any. */
  readonly key?: string | undefined;
  /** Regex selector source (PCRE), if any. */
  readonly keyRegex?: string | undefined;
  readonly count: boolean;
  /** Appends the values to `out`. `rule` is the rule being evaluated (RULE:msg ...). */
  resolve(tx: TransactionCollections, rule: CompiledRule | undefined, out: Entry[]): void;
  /** How the evaluation loop reads the variable without calling `resolve` (see VarRef). */
  readonly direct?: DirectRead | undefined;
  /** &TX:name without exclusions: the key, lower-cased (whether it exists is the value). */
  readonly countedTxKey?: string | undefined;
  /** With countedTxKey: its slot in a transaction's TxStore. */
  readonly countedTxSlot?: number | undefined;
  /** With countedTxKey: the value's two constant entries, absent ("0") and present ("1"). */
  readonly countEntries?: readonly [Entry, Entry] | undefined;
}

/** A variable the loop reads itself: a whole list, the names of a list, a single slot, a TX key. */
export type DirectRead =
  | { readonly kind: typeof READ_LIST | typeof READ_NAMES; readonly list: number; readonly collection: string }
  | { readonly kind: typeof READ_SINGLE; readonly slot: number; readonly name: string }
  | { readonly kind: typeof READ_TX_KEY; readonly lowerKey: string; readonly key: string; readonly slot: number }
  | { readonly kind: typeof READ_FILTERED; readonly list: number; readonly filter: string }
  | { readonly kind: typeof READ_XML };

/**
 * The list collections in Transaction.listAt's order (DirectRead.list and VarRef.index are
 * indexes into it).
 */
export const LIST_COLLECTIONS: readonly string[] = [
  'ARGS',
  'ARGS_GET',
  'ARGS_POST',
  'REQUEST_HEADERS',
  'REQUEST_HEADERS_NAMES',
  'REQUEST_COOKIES',
  'REQUEST_COOKIES_NAMES',
  'FILES',
  'FILES_NAMES',
  'FILES_SIZES',
  'FILES_TMPNAMES',
  'FILES_TMP_CONTENT',
  'MULTIPART_FILENAME',
  'MULTIPART_NAME',
  'MULTIPART_PART_HEADERS',
  'MATCHED_VARS',
  'MATCHED_VARS_NAMES',
  'RESPONSE_HEADERS',
  'RESPONSE_HEADERS_NAMES',
  'GEO',
];

export const READ_RESOLVE = 0;
export const READ_LIST = 1;
export const READ_NAMES = 2;
export const READ_SINGLE = 3;
export const READ_TX_KEY = 4;
/**
 * A key, key regex or exclusions over a list that only grows during a transaction
 * (REQUEST_HEADERS:User-Agent, REQUEST_COOKIES|!REQUEST_COOKIES:/__utm/ ...): resolved once per
 * transaction and kept until the list grows.
 */
export const READ_FILTERED = 5;
/** XML:/* and XML://@*: resolved only when the body was XML. */
export const READ_XML = 6;

/**
 * One variable of a rule as the evaluation loop sees it: every rule's variables have this one
 * shape, so the loop's property reads stay monomorphic (resolvers are closures of many shapes,
 * and a call through them per variable was a tenth of a benign request's time).
 */
export interface VarRef {
  readonly kind: number;
  /** READ_LIST/READ_NAMES/READ_FILTERED: list index (Transaction.listAt); READ_SINGLE: the slot; READ_TX_KEY: the TxStore slot (-1: none). */
  readonly index: number;
  /** READ_FILTERED: the place of its filter (one per distinct filter) in the transaction's cache of filtered lists. */
  readonly cacheSlot: number;
  /** READ_SINGLE: variable name; READ_TX_KEY: the key lower-cased; READ_NAMES: the collection. */
  readonly name: string;
  /** READ_TX_KEY: the key as the rule wrote it (ModSecurity names the value with it). */
  readonly key: string;
  readonly fullName: string;
  /** From the rule's own variables (not a SecRuleUpdateTarget addition): update exclusions apply. */
  readonly own: boolean;
  readonly resolver: VarResolver;
}

export interface CompiledOperator {
  /** "rx", "pm", ... */
  readonly name: string;
  /** Parameter as written (for messages). */
  readonly param: string;
  readonly negated: boolean;
  /** The parameter when it has no macros. */
  readonly staticParam?: string | undefined;
  /** @rx with a static pattern: the compiled expression. */
  readonly regex?: unknown;
  /** @pm/@pmFromFile: its non-empty phrases (it matches exactly when one occurs, ASCII case-insensitively). */
  readonly phrases?: readonly string[] | undefined;
  /**
   * The rule loop runs the commonest operators itself (Transaction.runOperator), without a call
   * to `run` (a megamorphic call into a closure and its context, for ~300 operator runs per
   * request). `numeric`: a static numeric comparison (operators/index.ts NUMERIC_*, 0 for none)
   * and its converted `operand`; `rx`: a static @rx other than `^.*$`, with its literal `gate`.
   */
  readonly numeric: number;
  readonly operand: number;
  readonly rx: CompiledRegex | undefined;
  readonly gate: readonly string[] | undefined;
  /** Evaluates (without negation). `capture`: the rule has the capture action. */
  run(tx: TransactionCollections, rule: CompiledRule, input: string): boolean;
}

export type SetVarOp = 'set' | 'one' | 'unset' | 'add' | 'sub';

export interface SetVarAction {
  /** TX, IP, GLOBAL, SESSION, USER, RESOURCE. */
  readonly collection: string;
  readonly name: Expand;
  /** The name lower-cased (the collection key), when it has no macros. */
  readonly lowerName: string | undefined;
  /** TX with a name without macros: its slot in a transaction's TxStore (txSlot()); else -1. */
  readonly txSlot: number;
  readonly op: SetVarOp;
  readonly value?: Expand | undefined;
}

/** Run-time actions executed after a full match, in rule order (ModSecurity's m_actionsRuntimePos). */
export type RuntimeAction =
  | { readonly kind: 'log' | 'nolog' | 'auditlog' | 'noauditlog' }
  | { readonly kind: 'block' }
  | { readonly kind: 'skipAfter'; readonly marker: string }
  | { readonly kind: 'skip'; readonly count: number }
  | { readonly kind: 'status'; readonly status: number }
  | { readonly kind: 'ctl'; readonly ctl: CtlAction }
  | { readonly kind: 'initcol'; readonly collection: string; readonly value: Expand }
  | { readonly kind: 'setenv'; readonly name: Expand; readonly value: Expand | undefined; readonly unset: boolean }
  | { readonly kind: 'noop' };

export type CtlAction =
  | { readonly kind: 'ruleRemoveById'; readonly ids: readonly number[]; readonly ranges: readonly (readonly [number, number])[] }
  | { readonly kind: 'ruleRemoveByTag'; readonly tag: string }
  | { readonly kind: 'ruleRemoveTargetById'; readonly id: number; readonly target: string }
  | { readonly kind: 'ruleRemoveTargetByTag'; readonly tag: string; readonly target: string }
  | { readonly kind: 'ruleEngine'; readonly value: 'On' | 'Off' | 'DetectionOnly' }
  | { readonly kind: 'requestBodyAccess'; readonly value: boolean }
  | { readonly kind: 'requestBodyProcessor'; readonly value: 'XML' | 'JSON' | 'URLENCODED' }
  | { readonly kind: 'forceRequestBodyVariable'; readonly value: boolean }
  | { readonly kind: 'ignored' };

export type DisruptiveAction =
  | { readonly kind: 'deny' | 'drop' | 'pass' }
  | { readonly kind: 'allow'; readonly scope: 'all' | 'request' | 'phase' }
  | { readonly kind: 'redirect'; readonly url: Expand };

/** One SecRule or SecAction (ModSecurity's RuleWithOperator / RuleUnconditional). */
export interface CompiledRule {
  readonly type: 'rule' | 'action';
  /** 0 for chain children. */
  readonly id: number;
  /** SecLang phase 0-5. */
  readonly phase: number;
  readonly file: string;
  readonly line: number;
  readonly variables: readonly VarResolver[];
  readonly operator: CompiledOperator | undefined;
  /** Node of the transformation trie for this rule's chain (0 = none). */
  readonly tnode: number;
  /** For multiMatch: the nodes along the chain (without 0). */
  readonly tpath: readonly number[];
  /**
   * For a multiMatch rule whose @rx has a literal gate (CompiledOperator.gate): the byte kinds
   * (transformations' charMask) without which no step of its chain can make a gate literal
   * appear. A value with none of them and none of the literals matches at no step, and is passed
   * over without running the chain (930110's four steps on every header). -1: not known.
   */
  readonly gateKinds: number;
  /** True when the rule has t:none (then SecDefaultAction transformations do not apply). */
  readonly hasNone: boolean;
  /** Transformations of the rule itself (after the last t:none), for the default-action merge. */
  readonly ownTransformations: readonly string[];
  readonly multiMatch: boolean;
  readonly capture: boolean;
  /** Has the `chain` action (a child follows). */
  readonly chained: boolean;
  child: CompiledRule | undefined;
  parent: CompiledRule | undefined;
  readonly setvars: readonly SetVarAction[];
  readonly tags: readonly Expand[];
  /** Static tag texts, for ruleRemoveByTag / ruleRemoveTargetByTag. */
  readonly tagTexts: readonly string[];
  /** The tags as logged, when none has a macro (the CRS's): copied into a match's message at once. */
  readonly staticTags: readonly string[] | undefined;
  readonly severity: number | undefined;
  readonly msg: Expand | undefined;
  readonly logdata: Expand | undefined;
  readonly runtime: readonly RuntimeAction[];
  readonly disruptive: DisruptiveAction | undefined;
  readonly hasBlock: boolean;
  readonly rev: string;
  readonly ver: string;
  /** Whether some value of its variables may match, without running the operator (literal-prefilter.ts). */
  prefilter: RulePrefilter | undefined;
  /** Set when the rule is a plain check of one TX value (see TxCheck). */
  txCheck: TxCheck | undefined;
  /**
   * The marker its skipAfter sets (the last one of its actions) and where, in its phase's list,
   * that marker next occurs after the rule (the list's length when it does not): the loop jumps
   * there at once instead of looking the marker up.
   */
  skipMarker: string | undefined;
  skipTarget: number;
  /** Set by SecRuleUpdateTargetById/ByTag: exclusions and additions (applied at run time like ModSecurity). */
  exclusions: UpdateExclusion[];
  additions: VarResolver[];
  /** variables + additions as the loop reads them (filled when the rule set is complete). */
  refs: VarRef[];
}

/**
 * A rule that only tests one TX value (or whether a TX key exists) and, when it matches, sets
 * variables and may jump, logging nothing: the CRS's paranoia-level gates and "is this setting
 * set?" checks, about 130 of a request's 280 rule runs. The loop runs them without the message
 * and action bookkeeping that cannot apply to them (Transaction.evaluateTxCheck); the effects
 * are the same (MATCHED_VAR*, setvars, skipAfter, pass).
 */
export interface TxCheck {
  readonly lowerKey: string;
  /** The key's slot in a transaction's TxStore (txSlot(); -1: none). */
  readonly slot: number;
  /** &TX:name: the value is "1" or "0". */
  readonly count: boolean;
  /** MATCHED_VAR_NAME when it matches ("TX:name" as the rule wrote it). */
  readonly matchedName: string;
  /**
   * For `&TX:name|TX:name`: the MATCHED_VAR_NAME of the value, read after the count (when the
   * variable exists); undefined when the rule reads one variable.
   */
  readonly valueName: string | undefined;
  /** Ends with `pass`, which (engine On) clears a pending intervention. */
  readonly pass: boolean;
  /**
   * What the loop needs besides, so that it reads this record alone (CompiledRuleSet.phaseTxChecks:
   * the records of a phase were made one after another, the rules were not): the rule, its
   * operator's static comparison (CompiledOperator.numeric, 0 for none) and negation, and its
   * skipAfter marker and target (CompiledRule.skipMarker, skipTarget).
   */
  readonly rule: CompiledRule;
  readonly numeric: number;
  readonly operand: number;
  readonly negated: boolean;
  readonly hasSetvars: boolean;
  readonly skipMarker: string | undefined;
  readonly skipTarget: number;
}

/**
 * A rule whose one variable is a TX value compared with a number (`TX:sql_error_match "@eq 1"`,
 * chained or logging, so not a TxCheck): the loop passes it over from this record when the value
 * is absent or fails the comparison, as it would not match (the CRS's response-phase leakage
 * chains and score checks, about 25 rule runs of a request).
 */
export interface TxGate {
  readonly lowerKey: string;
  /** The key's slot in a transaction's TxStore (txSlot(); -1: none). */
  readonly slot: number;
  /** The operator's static comparison (CompiledOperator.numeric, never 0 here) and negation. */
  readonly numeric: number;
  readonly operand: number;
  readonly negated: boolean;
}

/** A `!VAR` target of SecRuleUpdateTargetById/ByTag (ModSecurity's run-time exclusion list). */
export interface UpdateExclusion {
  readonly fullName: string;
  /** Regex selector: any value whose key matches is excluded (ModSecurity ignores the collection). */
  readonly re?: { test(key: string): boolean } | undefined;
}

export interface PhaseEntry {
  readonly marker?: string | undefined;
  readonly rule?: CompiledRule | undefined;
}

export interface CompiledRuleSet {
  readonly config: EngineConfig;
  /** Phases 0-5, each in load order, markers included. */
  readonly phases: readonly (readonly PhaseEntry[])[];
  /** For each phase: marker name -> indexes where it appears. */
  readonly markerIndex: readonly ReadonlyMap<string, readonly number[]>[];
  /** Node 0 is the identity. */
  readonly transformations: readonly TransformationNode[];
  /** Number of distinct transformation functions used. */
  readonly transformationKinds: number;
  /** Which rules may match the values of a variable, per variable and chain node (literal-prefilter.ts). */
  readonly prefilter: LiteralPrefilters<VarRef>;
  /** The same per phase, by position in `phases` (literal-prefilter.ts). */
  readonly phasePrefilters: readonly PhasePrefilters[];
  /** Per phase, parallel to `phases`: the entry's TxCheck, when it is one (the loop runs it from the record). */
  readonly phaseTxChecks: readonly (readonly (TxCheck | undefined)[])[];
  /** Per phase, parallel to `phases`: the entry's TxGate, when it has one (not a TxCheck). */
  readonly phaseTxGates: readonly (readonly (TxGate | undefined)[])[];
  /**
   * Per phase, parallel to `phases`: each entry's rule and marker, in arrays of their own (the loop
   * reads them for every entry; the entry objects lie wherever the compiler left them).
   */
  readonly phaseRules: readonly (readonly (CompiledRule | undefined)[])[];
  readonly phaseMarkers: readonly (readonly (string | undefined)[])[];
  /**
   * Per phase, parallel to `phases`: for a marker, the index of the last marker of the run of
   * markers it starts or is in (itself when alone); -1 for a rule. A marker does nothing unless a
   * jump to it is pending, so the loop passes over the whole run at once (the response phases
   * and the logging phase are mostly the request files' markers: runs of up to 40).
   */
  readonly phaseMarkerRunEnds: readonly Int32Array[];
  /** Default actions per phase (SecDefaultAction): runtime actions, transformations, disruptive. */
  readonly defaults: readonly DefaultActions[];
  /** SecRuleRemoveById / ByTag / ByMsg. */
  readonly removedIds: ReadonlySet<number>;
  readonly removedRanges: readonly (readonly [number, number])[];
  readonly removedTags: readonly string[];
  readonly removedMsgs: readonly string[];
  /** Whether any of the four lists above is non-empty. */
  readonly removesRules: boolean;
  readonly ruleCount: number;
  readonly rulesById: ReadonlyMap<number, CompiledRule>;
  /** Number of READ_FILTERED variables (VarRef.cacheSlot is below it). */
  readonly filteredSlots: number;
  /** Whether some rule, SecRuleUpdateTarget* addition or macro reads FULL_REQUEST or FULL_REQUEST_LENGTH. */
  readonly readsFullRequest: boolean;
}

export interface DefaultActions {
  readonly runtime: readonly RuntimeAction[];
  readonly transformations: readonly string[];
  /** Disruptive actions, in order (what `block` runs). */
  readonly disruptive: readonly DisruptiveAction[];
}
