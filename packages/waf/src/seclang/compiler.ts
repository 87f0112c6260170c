/**
 * SecLang directives to a CompiledRuleSet, once. Every rule is checked here: an unknown
 * variable, operator or action, a pattern that cannot be translated, a duplicated id, a chain
 * without its child: all are load errors naming file and line, never a rule silently skipped.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import type {
  CompiledRule,
  CompiledRuleSet,
  CtlAction,
  DefaultActions,
  DisruptiveAction,
  EngineConfig,
  Expand,
  MacroVar,
  PhaseEntry,
  RuntimeAction,
  SetVarAction,
  TransformationNode,
  TxCheck,
  UpdateExclusion,
  VarRef,
  VarResolver,
} from './program.ts';
import { LIST_COLLECTIONS, READ_FILTERED, READ_LIST, READ_NAMES, READ_RESOLVE, READ_SINGLE, READ_TX_KEY, READ_XML } from './program.ts';
import { compileOperator } from '../operators/index.ts';
import { compileKeyRegex } from '../regex/runtime.ts';
import { buildLiteralPrefilters, phasePrefilters } from '../prefilter/literal-prefilter.ts';
import { parseSecLang, parseVariable, SecLangError, splitVariables } from './parser.ts';
import type { ActionSpec, Directive, VariableSpec } from './parser.ts';
import { CHANGES_ON, literalEffect, TRANSFORMATION_ALIASES, TRANSFORMATIONS } from '../transformations/index.ts';
import type { Transaction } from '../transaction/transaction.ts';
import { isComputedSingle } from '../transaction/transaction.ts';
import { compileVariable, keyExclusionsFor, lowerAscii } from '../variables/resolvers.ts';

/** One piece of SecLang to load (same shape as modsecurity-config.ts's RulesSource). */
export type CompileSource = { readonly text: string; readonly name: string } | { readonly file: string };

const SEVERITIES: Record<string, number> = {
  emergency: 0,
  alert: 1,
  critical: 2,
  error: 3,
  warning: 4,
  notice: 5,
  info: 6,
  debug: 7,
};

/** Compiles "text with %{VAR} macros". */
export function compileExpand(text: string): Expand {
  if (!text.includes('%{')) return { text };
  const parts: (string | MacroVar)[] = [];
  let i = 0;
  let literal = '';
  while (i < text.length) {
    const start = text.indexOf('%{', i);
    if (start < 0) {
      literal += text.slice(i);
      break;
    }
    const end = text.indexOf('}', start + 2);
    if (end < 0) {
      literal += text.slice(i);
      break;
    }
    literal += text.slice(i, start);
    const name = text.slice(start + 2, end);
    if (literal !== '') parts.push(literal);
    literal = '';
    parts.push({ resolver: macroResolver(name) });
    i = end + 1;
  }
  if (literal !== '') parts.push(literal);
  return { parts };
}

function macroResolver(name: string): VarResolver {
  // %{tx.foo}, %{TX:foo}, %{MATCHED_VAR}, %{request_headers.host}, %{rule.msg}
  const colon = name.indexOf(':');
  const dot = name.indexOf('.');
  let cut = colon;
  if (cut < 0 || (dot >= 0 && dot < cut)) cut = dot;
  const spec: VariableSpec =
    cut < 0
      ? { count: false, exclude: false, collection: name.toUpperCase(), text: name }
      : { count: false, exclude: false, collection: name.slice(0, cut).toUpperCase(), key: name.slice(cut + 1), text: name };
  return compileVariable(spec, []);
}

export function expandWith(tx: Transaction, e: Expand, rule: CompiledRule | undefined): string {
  return tx.expand(e, rule);
}

function defaultConfig(): EngineConfig {
  return {
    ruleEngine: 'Off',
    requestBodyAccess: false,
    requestBodyLimit: 134217728,
    requestBodyNoFilesLimit: undefined,
    requestBodyLimitAction: 'Reject',
    requestBodyJsonDepthLimit: 10000,
    responseBodyAccess: false,
    responseBodyLimit: 524288,
    responseBodyLimitAction: 'Reject',
    responseBodyMimeTypes: ['text/plain', 'text/html'],
    argumentSeparator: '&',
    argumentsLimit: undefined,
    pcreMatchLimit: 3000,
    components: [],
  };
}

class TransformationTrie {
  readonly nodes: TransformationNode[] = [{ id: 0, parent: 0, name: '', kind: -1, fn: (s) => s, changesOn: -1, chainChangesOn: 0 }];
  private readonly index = new Map<string, number>();
  readonly kinds: string[] = [];

  /** Node id for a chain of transformation names (lower-case). */
  node(chain: readonly string[]): { node: number; path: number[] } {
    let cur = 0;
    const path: number[] = [];
    for (const name of chain) {
      const key = `${cur}/${name}`;
      let id = this.index.get(key);
      if (id === undefined) {
        const fn = TRANSFORMATIONS.get(name);
        if (!fn) throw new Error(`unknown transformation t:${name}`);
        id = this.nodes.length;
        let kind = this.kinds.indexOf(name);
        if (kind < 0) kind = this.kinds.push(name) - 1;
        const changesOn = CHANGES_ON.get(name) ?? -1;
        const before = this.nodes[cur]!.chainChangesOn;
        const chainChangesOn = changesOn < 0 || before < 0 ? -1 : before | changesOn;
        this.nodes.push({ id, parent: cur, name, kind, fn, changesOn, chainChangesOn });
        this.index.set(key, id);
      }
      cur = id;
      path.push(id);
    }
    return { node: cur, path };
  }
}

function parseCtl(value: string): CtlAction {
  const eq = value.indexOf('=');
  if (eq < 0) throw new Error(`bad ctl:${value}`);
  const name = value.slice(0, eq).toLowerCase();
  const arg = value.slice(eq + 1);
  switch (name) {
    case 'ruleremovebyid': {
      const ids: number[] = [];
      const ranges: [number, number][] = [];
      for (const part of arg.split(' ')) {
        const b = part.trim();
        if (b === '') continue;
        const dash = b.indexOf('-');
        if (dash >= 0) {
          const a = Number.parseInt(b.slice(0, dash), 10);
          const z = Number.parseInt(b.slice(dash + 1), 10);
          if (!Number.isFinite(a) || !Number.isFinite(z) || a > z) throw new Error(`bad range in ctl:ruleRemoveById: ${b}`);
          ranges.push([a, z]);
        } else {
          const n = Number.parseInt(b, 10);
          if (!Number.isFinite(n)) throw new Error(`not a number in ctl:ruleRemoveById: ${b}`);
          ids.push(n);
        }
      }
      if (ids.length === 0 && ranges.length === 0) throw new Error(`ctl:ruleRemoveById without ids`);
      return { kind: 'ruleRemoveById', ids, ranges };
    }
    case 'ruleremovebytag':
      return { kind: 'ruleRemoveByTag', tag: arg };
    case 'ruleremovetargetbyid': {
      const [id, target] = arg.split(';');
      const n = Number.parseInt(id ?? '', 10);
      if (!Number.isFinite(n) || target === undefined) throw new Error(`bad ctl:ruleRemoveTargetById=${arg}`);
      return { kind: 'ruleRemoveTargetById', id: n, target };
    }
    case 'ruleremovetargetbytag': {
      const [tag, target] = arg.split(';');
      if (tag === undefined || target === undefined) throw new Error(`bad ctl:ruleRemoveTargetByTag=${arg}`);
      return { kind: 'ruleRemoveTargetByTag', tag, target };
    }
    case 'ruleengine': {
      const v = arg.toLowerCase();
      if (v === 'on') return { kind: 'ruleEngine', value: 'On' };
      if (v === 'off') return { kind: 'ruleEngine', value: 'Off' };
      if (v === 'detectiononly') return { kind: 'ruleEngine', value: 'DetectionOnly' };
      throw new Error(`bad ctl:ruleEngine=${arg}`);
    }
    case 'requestbodyaccess': {
      const v = arg.toLowerCase();
      if (v === 'on' || v === 'true') return { kind: 'requestBodyAccess', value: true };
      if (v === 'off' || v === 'false') return { kind: 'requestBodyAccess', value: false };
      throw new Error(`bad ctl:requestBodyAccess=${arg}`);
    }
    case 'requestbodyprocessor': {
      const v = arg.toUpperCase();
      if (v === 'XML' || v === 'JSON' || v === 'URLENCODED') return { kind: 'requestBodyProcessor', value: v };
      throw new Error(`bad ctl:requestBodyProcessor=${arg}`);
    }
    case 'forcerequestbodyvariable':
      return { kind: 'forceRequestBodyVariable', value: /^on$/i.test(arg) };
    case 'requestbodylimit':
    case 'auditengine':
    case 'auditlogparts':
      return { kind: 'ignored' };
    default:
      throw new Error(`unsupported ctl:${name}`);
  }
}

function parseSetVar(value: string): SetVarAction {
  let text = value;
  let op: SetVarAction['op'];
  let valueText: string | undefined;
  if (text.startsWith('!')) {
    op = 'unset';
    text = text.slice(1);
  } else {
    const eq = text.indexOf('=');
    if (eq < 0) op = 'one';
    else {
      valueText = text.slice(eq + 1);
      text = text.slice(0, eq);
      if (valueText.startsWith('+')) {
        op = 'add';
        valueText = valueText.slice(1);
      } else if (valueText.startsWith('-')) {
        op = 'sub';
        valueText = valueText.slice(1);
      } else op = 'set';
    }
  }
  const dot = text.indexOf('.');
  const colon = text.indexOf(':');
  const cut = dot >= 0 && (colon < 0 || dot < colon) ? dot : colon;
  if (cut < 0) throw new Error(`setvar:${value}: missing collection`);
  const collection = text.slice(0, cut).toUpperCase();
  if (!['TX', 'IP', 'GLOBAL', 'SESSION', 'USER', 'RESOURCE'].includes(collection)) throw new Error(`setvar: unsupported collection ${collection}`);
  const name = compileExpand(text.slice(cut + 1));
  return {
    collection,
    name,
    lowerName: name.text !== undefined ? lowerAscii(name.text) : undefined,
    op,
    ...(valueText !== undefined ? { value: compileExpand(valueText) } : {}),
  };
}

interface ParsedActions {
  id?: number;
  phase?: number;
  chain: boolean;
  multiMatch: boolean;
  capture: boolean;
  transformations: { name: string; none: boolean }[];
  setvars: SetVarAction[];
  tags: Expand[];
  tagTexts: string[];
  severity?: number;
  msg?: Expand;
  logdata?: Expand;
  runtime: RuntimeAction[];
  disruptive?: DisruptiveAction;
  disruptives: DisruptiveAction[];
  hasBlock: boolean;
  rev: string;
  ver: string;
}

/**
 * One string object per marker name in a rule set (`names`: the compile's), shared by its
 * SecMarker entries and skipAfter actions: the rule loop compares a reached marker with the
 * pending one about fifty times a request, and two equal strings that are distinct objects are
 * compared byte by byte (the CRS's names are 30-40 bytes, all alike up to their last part); the
 * same object compares at once.
 */
function markerName(names: Map<string, string>, name: string): string {
  const known = names.get(name);
  if (known !== undefined) return known;
  names.set(name, name);
  return name;
}

function parsePhase(v: string): number {
  const lower = v.toLowerCase();
  if (/^\d+$/.test(v)) {
    const n = Number(v);
    if (n < 0 || n > 5) throw new Error(`unknown phase ${v}`);
    return n;
  }
  if (lower === 'request') return 2;
  if (lower === 'response') return 4;
  if (lower === 'logging') return 5;
  throw new Error(`unknown phase ${v}`);
}

function parseActionList(actions: readonly ActionSpec[], markerNames: Map<string, string>): ParsedActions {
  const out: ParsedActions = {
    chain: false,
    multiMatch: false,
    capture: false,
    transformations: [],
    setvars: [],
    tags: [],
    tagTexts: [],
    runtime: [],
    disruptives: [],
    hasBlock: false,
    rev: '',
    ver: '',
  };
  const need = (a: ActionSpec): string => {
    if (a.value === undefined) throw new Error(`action ${a.name} needs a value`);
    return a.value;
  };
  for (const a of actions) {
    switch (a.name) {
      case 'id': {
        const v = need(a);
        if (!/^\d+$/.test(v)) throw new Error(`bad id ${v}`);
        out.id = Number(v);
        if (out.id === 0) throw new Error('id 0 is not allowed');
        break;
      }
      case 'phase':
        out.phase = parsePhase(need(a));
        break;
      case 'chain':
        out.chain = true;
        break;
      case 'multimatch':
        out.multiMatch = true;
        break;
      case 'capture':
        out.capture = true;
        break;
      case 't': {
        const raw = need(a).toLowerCase();
        const name = TRANSFORMATION_ALIASES.get(raw) ?? raw;
        if (name !== 'none' && !TRANSFORMATIONS.has(name)) throw new Error(`unknown transformation t:${a.value}`);
        out.transformations.push({ name, none: name === 'none' });
        break;
      }
      case 'setvar':
        out.setvars.push(parseSetVar(need(a)));
        break;
      case 'tag':
        out.tags.push(compileExpand(need(a)));
        out.tagTexts.push(need(a));
        break;
      case 'severity': {
        const v = need(a).toLowerCase();
        const n = SEVERITIES[v] ?? (/^\d+$/.test(v) ? Number(v) : undefined);
        if (n === undefined) throw new Error(`bad severity ${a.value}`);
        out.severity = n;
        break;
      }
      case 'msg':
        out.msg = compileExpand(need(a));
        break;
      case 'logdata':
        out.logdata = compileExpand(need(a));
        break;
      case 'log':
      case 'nolog':
      case 'auditlog':
      case 'noauditlog':
        out.runtime.push({ kind: a.name });
        break;
      case 'block':
        out.hasBlock = true;
        out.runtime.push({ kind: 'block' });
        break;
      case 'deny':
      case 'drop':
      case 'pass':
        out.disruptive = { kind: a.name };
        out.disruptives.push(out.disruptive);
        break;
      case 'allow': {
        const v = (a.value ?? '').toLowerCase();
        out.disruptive = { kind: 'allow', scope: v === 'request' ? 'request' : v === 'phase' ? 'phase' : 'all' };
        out.disruptives.push(out.disruptive);
        break;
      }
      case 'redirect':
        out.disruptive = { kind: 'redirect', url: compileExpand(need(a)) };
        out.disruptives.push(out.disruptive);
        break;
      case 'status': {
        const v = need(a);
        if (!/^\d+$/.test(v)) throw new Error(`bad status ${v}`);
        out.runtime.push({ kind: 'status', status: Number(v) });
        break;
      }
      case 'skipafter':
        out.runtime.push({ kind: 'skipAfter', marker: markerName(markerNames, need(a)) });
        break;
      case 'skip': {
        const v = need(a);
        if (!/^\d+$/.test(v)) throw new Error(`bad skip ${v}`);
        out.runtime.push({ kind: 'skip', count: Number(v) });
        break;
      }
      case 'ctl':
        out.runtime.push({ kind: 'ctl', ctl: parseCtl(need(a)) });
        break;
      case 'initcol': {
        const v = need(a);
        const eq = v.indexOf('=');
        if (eq < 0) throw new Error('initcol: missing =');
        const coll = v.slice(0, eq).toLowerCase();
        if (coll !== 'ip' && coll !== 'global' && coll !== 'resource') throw new Error(`initcol: unsupported collection ${coll}`);
        out.runtime.push({ kind: 'initcol', collection: coll.toUpperCase(), value: compileExpand(v.slice(eq + 1)) });
        break;
      }
      case 'setenv': {
        const v = need(a);
        const unset = v.startsWith('!');
        const body = unset ? v.slice(1) : v;
        const eq = body.indexOf('=');
        out.runtime.push({
          kind: 'setenv',
          unset,
          name: compileExpand(eq < 0 ? body : body.slice(0, eq)),
          value: eq < 0 ? undefined : compileExpand(body.slice(eq + 1)),
        });
        break;
      }
      case 'expirevar':
      case 'setuid':
      case 'setsid':
      case 'setrsc':
      case 'sanitisearg':
      case 'sanitisematched':
      case 'sanitisematchedbytes':
      case 'sanitiserequestheader':
      case 'sanitiseresponseheader':
      case 'xmlns':
        // Accepted; no effect on verdicts of a single transaction (persistent collections and
        // audit-log sanitising are not part of this engine).
        out.runtime.push({ kind: 'noop' });
        break;
      case 'rev':
        out.rev = a.value ?? '';
        break;
      case 'ver':
        out.ver = a.value ?? '';
        break;
      case 'maturity':
      case 'accuracy':
        break;
      default:
        throw new Error(`action ${a.name} is not supported by the compiled engine`);
    }
  }
  return out;
}

/** Options of compileRuleSet. */
export interface CompileOptions {
  /** Called for each loaded rule file (for tests/tools). */
  readonly onFile?: (file: string) => void;
  /** Literal prefilters (literal-prefilter.ts); default true. */
  readonly prefilter?: boolean;
  /** Plain TX checks run by the loop's short path (program.ts, TxCheck); default true. */
  readonly txChecks?: boolean;

}

export function readRulesFile(file: string): Directive[] {
  const text = readFileSync(file, 'latin1');
  return parseSecLang(text, file, (path, from) => {
    const target = isAbsolute(path) ? path : join(dirname(from), path);
    return readRulesFile(target);
  });
}

export function compileRuleSet(sources: readonly CompileSource[], options: CompileOptions = {}): CompiledRuleSet {
  const config = defaultConfig();
  const phases: PhaseEntry[][] = [[], [], [], [], [], []];
  const defaults: { runtime: RuntimeAction[]; transformations: string[]; disruptive: DisruptiveAction[] }[] = Array.from({ length: 6 }, () => ({
    runtime: [],
    transformations: [],
    disruptive: [],
  }));
  const trie = new TransformationTrie();
  const rulesById = new Map<number, CompiledRule>();
  const allRules: CompiledRule[] = [];
  const markerNames = new Map<string, string>();
  const removedIds = new Set<number>();
  const removedRanges: [number, number][] = [];
  const removedTags: string[] = [];
  const removedMsgs: string[] = [];
  const updates: { directive: Directive; run: () => void }[] = [];
  let ruleCount = 0;
  const opContext = {
    compileExpand,
    expand: (tx: Transaction, e: Expand, rule: CompiledRule | undefined) => tx.expand(e, rule),
  };

  for (const source of sources) {
    let directives: Directive[];
    const sourceName = 'file' in source ? source.file : source.name;
    if ('file' in source) {
      options.onFile?.(source.file);
      directives = readRulesFile(source.file);
    } else {
      directives = parseSecLang(source.text, source.name, (path, from) => readRulesFile(isAbsolute(path) ? path : join(dirname(from), path)));
    }
    // per source ("driver"): last rule for chaining, SecDefaultAction once per phase
    let lastRule: CompiledRule | undefined;
    const defaultPhasesSeen = new Set<number>();
    for (const d of directives) {
      try {
        switch (d.kind) {
          case 'rule':
          case 'action': {
            const parsed = parseActionList(d.actions, markerNames);
            const isChild = d.kind === 'rule' && lastRule !== undefined && lastRule.chained && lastRule.child === undefined;
            let variables: VarResolver[] = [];
            if (d.kind === 'rule') {
              const excludes = d.variables.filter((v) => v.exclude);
              const plain = d.variables.filter((v) => !v.exclude);
              // ModSecurity drops a variable that is also excluded as a whole (ARGS:x|!ARGS:x).
              const kept = plain.filter((v) => !excludes.some((x) => x.collection === v.collection && x.key === v.key && x.keyRegex === v.keyRegex && x.count === v.count));
              variables = kept.map((v) => compileVariable(v, keyExclusionsFor(v.collection, excludes)));
            }
            const operator =
              d.kind === 'rule' ? compileOperator(d.operator, { ...opContext, file: d.file }) : undefined;
            // transformations after the last t:none
            let lastNone = -1;
            parsed.transformations.forEach((t, k) => {
              if (t.none) lastNone = k;
            });
            const own = parsed.transformations.slice(lastNone + 1).map((t) => t.name);
            let phase = parsed.phase ?? 1;
            if (isChild) {
              if (parsed.disruptive) throw new Error('disruptive actions can only be specified by chain starter rules');
              phase = lastRule!.phase;
            } else if (d.kind === 'rule' || d.kind === 'action') {
              if (parsed.id === undefined) throw new Error('rules must have an id');
            }
            const rule = {
              type: d.kind === 'rule' ? 'rule' : 'action',
              id: isChild ? 0 : parsed.id!,
              phase,
              file: d.file,
              line: d.line,
              variables,
              operator,
              tnode: 0,
              tpath: [],
              hasNone: lastNone >= 0,
              ownTransformations: own,
              multiMatch: parsed.multiMatch,
              capture: parsed.capture,
              chained: parsed.chain,
              child: undefined,
              parent: undefined,
              setvars: parsed.setvars,
              tags: parsed.tags,
              tagTexts: parsed.tagTexts,
              staticTags: parsed.tags.length > 0 && parsed.tags.every((t) => t.text !== undefined) ? parsed.tags.map((t) => t.text!) : undefined,
              severity: parsed.severity,
              msg: parsed.msg,
              logdata: parsed.logdata,
              runtime: parsed.runtime,
              disruptive: parsed.disruptive,
              hasBlock: parsed.hasBlock,
              rev: parsed.rev,
              ver: parsed.ver,
              exclusions: [],
              additions: [],
              refs: [],
              prefilter: undefined,
              txCheck: undefined,
              skipMarker: undefined,
              skipTarget: -1,
              gateKinds: -1,
            } as CompiledRule & { tnode: number; tpath: number[] };
            allRules.push(rule);
            if (isChild) {
              lastRule!.child = rule;
              rule.parent = lastRule;
              lastRule = rule;
              break;
            }
            if (d.kind === 'rule') {
              if (rulesById.has(rule.id)) throw new Error(`rule id ${rule.id} is duplicated`);
              rulesById.set(rule.id, rule);
              lastRule = rule;
            } else {
              // SecAction does not take part in chaining
              if (rulesById.has(rule.id)) throw new Error(`rule id ${rule.id} is duplicated`);
              rulesById.set(rule.id, rule);
              lastRule = undefined;
            }
            ruleCount++;
            phases[phase]!.push({ rule });
            break;
          }
          case 'marker':
            for (const list of phases) list.push({ marker: markerName(markerNames, d.name) });
            break;
          case 'defaultAction': {
            const parsed = parseActionList(d.actions, markerNames);
            const phase = parsed.phase ?? 1;
            if (defaultPhasesSeen.has(phase)) throw new Error(`SecDefaultAction for phase ${phase} was given already`);
            defaultPhasesSeen.add(phase);
            if (parsed.transformations.some((t) => t.none)) throw new Error('t:none is not allowed in SecDefaultAction');
            if (parsed.disruptives.length === 0) throw new Error('SecDefaultAction must specify a disruptive action');
            const target = defaults[phase]!;
            target.runtime.push(...parsed.runtime);
            target.transformations.push(...parsed.transformations.map((t) => t.name));
            target.disruptive.push(...parsed.disruptives);
            if (parsed.setvars.length > 0 || parsed.tags.length > 0 || parsed.msg || parsed.logdata) {
              throw new Error('SecDefaultAction with setvar/tag/msg/logdata is not supported by the compiled engine');
            }
            break;
          }
          case 'config':
            applyConfig(d, config, { removedIds, removedRanges, removedTags, removedMsgs, updates, sourceName });
            break;
        }
      } catch (error) {
        if (error instanceof SecLangError) throw error;
        throw new SecLangError(d.file, d.line, (error as Error).message);
      }
    }
    if (lastRule !== undefined && lastRule.chained && lastRule.child === undefined) {
      throw new SecLangError(lastRule.file, lastRule.line, 'chained rule without a following rule');
    }
  }
  // transformation chains (SecDefaultAction transformations apply to rules without t:none)
  for (const rule of allRules) {
    const base = rule.hasNone ? [] : defaults[rule.phase]!.transformations;
    const { node, path } = trie.node([...base, ...rule.ownTransformations]);
    (rule as unknown as { tnode: number }).tnode = node;
    (rule as unknown as { tpath: number[] }).tpath = path;
    (rule as unknown as { gateKinds: number }).gateKinds = gateKinds(rule, path, trie.nodes);
  }
  // SecRuleUpdateTargetBy* (they name rules loaded anywhere)
  const ctx: UpdateContext = { rulesById, allRules };
  for (const u of updates) {
    try {
      (u.run as (c: UpdateContext) => void)(ctx);
    } catch (error) {
      throw new SecLangError(u.directive.file, u.directive.line, (error as Error).message);
    }
  }
  const slots = new Map<string, number>();
  for (const rule of allRules) rule.refs = [...rule.variables.map((v) => varRef(v, true, slots)), ...rule.additions.map((v) => varRef(v, false, slots))];
  // every match adds to MATCHED_VARS and its names
  const growingLists = new Set(['MATCHED_VARS', 'MATCHED_VARS_NAMES'].map((name) => LIST_COLLECTIONS.indexOf(name)));
  const prefilter = buildLiteralPrefilters(options.prefilter === false ? [] : allRules, growingLists, isComputedSingle, trie.nodes);
  const markerIndex = phases.map((list) => {
    const m = new Map<string, number[]>();
    list.forEach((e, k) => {
      if (e.marker !== undefined) {
        const arr = m.get(e.marker) ?? [];
        arr.push(k);
        m.set(e.marker, arr);
      }
    });
    return m;
  });
  phases.forEach((list, phase) => {
    list.forEach((entry, k) => {
      const rule = entry.rule;
      if (rule === undefined) return;
      // the last skipAfter of its actions is the marker it leaves set
      for (const a of [...(defaults[phase]?.runtime ?? []), ...rule.runtime]) if (a.kind === 'skipAfter') rule.skipMarker = a.marker;
      if (rule.skipMarker !== undefined) rule.skipTarget = markerIndex[phase]!.get(rule.skipMarker)?.find((at) => at > k) ?? list.length;
    });
  });
  const txKeySlots = new Map<string, number>();
  if (options.txChecks !== false) for (const rule of allRules) rule.txCheck = txCheckOf(rule, defaults[rule.phase], txKeySlots);
  return {
    config,
    phases,
    markerIndex,
    transformations: trie.nodes,
    transformationKinds: trie.kinds.length,
    prefilter,
    phasePrefilters: phasePrefilters(phases),
    txKeySlots,
    phaseTxChecks: phases.map((list) => list.map((entry) => entry.rule?.txCheck)),
    phaseRules: phases.map((list) => list.map((entry) => entry.rule)),
    phaseMarkers: phases.map((list) => list.map((entry) => entry.marker)),
    defaults: defaults as DefaultActions[],
    removedIds,
    removedRanges,
    removedTags,
    removedMsgs,
    removesRules: removedIds.size > 0 || removedRanges.length > 0 || removedTags.length > 0 || removedMsgs.length > 0,
    ruleCount,
    rulesById,
    filteredSlots: slots.size,
  };
}

/**
 * CompiledRule.gateKinds of a rule whose chain runs through `path`: the union of what lets each
 * step make a gate literal appear, known only while no step can be handed such a kind by the
 * steps before it (cmdLine's spaces before a compressWhitespace).
 */
function gateKinds(rule: CompiledRule, path: readonly number[], nodes: readonly TransformationNode[]): number {
  const gate = rule.operator?.gate;
  if (!rule.multiMatch || gate === undefined || rule.operator!.negated) return -1;
  let kinds = 0;
  let added = 0;
  for (const node of path) {
    let adds = 0;
    for (const literal of gate) {
      const effect = literalEffect(nodes[node]!.name, literal);
      if (effect === undefined || (effect.creating & added) !== 0) return -1;
      kinds |= effect.creating;
      adds |= effect.adds;
    }
    added |= adds;
  }
  return kinds;
}

const LOG_ACTIONS = new Set(['log', 'nolog', 'auditlog', 'noauditlog']);

/** The rule as a TxCheck, when it is one (program.ts). */
function txCheckOf(rule: CompiledRule, defaults: DefaultActions | undefined, slots: Map<string, number>): TxCheck | undefined {
  if (rule.type !== 'rule' || rule.parent !== undefined || rule.chained || rule.multiMatch || rule.capture) return undefined;
  if (rule.refs.length > 2 || rule.exclusions.length > 0 || rule.tnode !== 0 || rule.operator === undefined) return undefined;
  if (rule.tags.length > 0 || rule.severity !== undefined || rule.msg !== undefined || rule.logdata !== undefined || rule.hasBlock) return undefined;
  if (rule.disruptive !== undefined && rule.disruptive.kind !== 'pass') return undefined;
  const actions = [...(defaults?.runtime ?? []), ...rule.runtime];
  if (!actions.every((a) => LOG_ACTIONS.has(a.kind) || a.kind === 'skipAfter')) return undefined;
  // logs nothing: the last of log/nolog (and their audit forms) says nolog
  let save = true;
  for (const a of actions) if (LOG_ACTIONS.has(a.kind)) save = a.kind === 'log' || a.kind === 'auditlog';
  if (save) return undefined;
  const ref = rule.refs[0]!;
  const pass = rule.disruptive?.kind === 'pass';
  const slotOf = (lowerKey: string): number => {
    let slot = slots.get(lowerKey);
    if (slot === undefined) slots.set(lowerKey, (slot = slots.size));
    return slot;
  };
  const op = rule.operator;
  // (skipMarker and skipTarget are set by now: compileRuleSet computes them first)
  const loop = { rule, numeric: op.numeric, operand: op.operand, negated: op.negated, hasSetvars: rule.setvars.length > 0, skipMarker: rule.skipMarker, skipTarget: rule.skipTarget };
  const second = rule.refs[1];
  if (ref.kind === READ_TX_KEY) {
    if (second !== undefined) return undefined;
    return { lowerKey: ref.name, slot: slotOf(ref.name), count: false, matchedName: `TX:${ref.key}`, valueName: undefined, pass, ...loop };
  }
  const counted = ref.resolver.countedTxKey;
  if (counted === undefined) return undefined;
  // &TX:name|TX:name (the CRS's "exclusions for this application?" checks): the count, then the value
  if (second !== undefined && !(second.kind === READ_TX_KEY && second.name === counted)) return undefined;
  return { lowerKey: counted, slot: slotOf(counted), count: true, matchedName: ref.resolver.fullName, valueName: second && `TX:${second.key}`, pass, ...loop };
}

/** `slots`: filter -> cache slot, shared by every rule reading the same filtered list. */
function varRef(resolver: VarResolver, own: boolean, slots: Map<string, number>): VarRef {
  const d = resolver.direct;
  const base = { kind: READ_RESOLVE, index: 0, cacheSlot: 0, name: '', key: '', fullName: resolver.fullName, own, resolver };
  if (d === undefined) return base;
  switch (d.kind) {
    case READ_LIST:
    case READ_NAMES:
      return { ...base, kind: d.kind, index: d.list, name: d.collection };
    case READ_SINGLE:
      return { ...base, kind: d.kind, index: d.slot, name: d.name };
    case READ_TX_KEY:
      return { ...base, kind: d.kind, name: d.lowerKey, key: d.key };
    case READ_FILTERED: {
      let cacheSlot = slots.get(d.filter);
      if (cacheSlot === undefined) {
        cacheSlot = slots.size;
        slots.set(d.filter, cacheSlot);
      }
      return { ...base, kind: d.kind, index: d.list, cacheSlot };
    }
    case READ_XML:
      return { ...base, kind: d.kind };
  }
}

interface UpdateContext {
  rulesById: Map<number, CompiledRule>;
  allRules: CompiledRule[];
}

function applyConfig(
  d: Directive & { kind: 'config' },
  config: EngineConfig,
  acc: {
    removedIds: Set<number>;
    removedRanges: [number, number][];
    removedTags: string[];
    removedMsgs: string[];
    updates: { directive: Directive; run: () => void }[];
    sourceName: string;
  },
): void {
  const arg = d.args[0] ?? '';
  const onOff = (): boolean => {
    const v = arg.toLowerCase();
    if (v === 'on') return true;
    if (v === 'off') return false;
    throw new Error(`${d.name} takes On or Off`);
  };
  const int = (): number => {
    if (!/^\d+$/.test(arg)) throw new Error(`${d.name} takes a number`);
    return Number(arg);
  };
  switch (d.name) {
    case 'secruleengine': {
      const v = arg.toLowerCase();
      if (v === 'on') config.ruleEngine = 'On';
      else if (v === 'off') config.ruleEngine = 'Off';
      else if (v === 'detectiononly') config.ruleEngine = 'DetectionOnly';
      else throw new Error('SecRuleEngine takes On, Off or DetectionOnly');
      return;
    }
    case 'secrequestbodyaccess':
      config.requestBodyAccess = onOff();
      return;
    case 'secrequestbodylimit':
      config.requestBodyLimit = int();
      return;
    case 'secrequestbodynofileslimit':
      config.requestBodyNoFilesLimit = int();
      return;
    case 'secrequestbodylimitaction':
      config.requestBodyLimitAction = /^reject$/i.test(arg) ? 'Reject' : /^processpartial$/i.test(arg) ? 'ProcessPartial' : fail();
      return;
    case 'secrequestbodyjsondepthlimit':
      config.requestBodyJsonDepthLimit = int();
      return;
    case 'secresponsebodyaccess':
      config.responseBodyAccess = onOff();
      return;
    case 'secresponsebodymimetype':
      config.responseBodyMimeTypes = d.args.join(' ').split(/\s+/).filter((s) => s !== '');
      return;
    case 'secresponsebodymimetypesclear':
      config.responseBodyMimeTypes = [];
      return;
    case 'secresponsebodylimit':
      config.responseBodyLimit = int();
      return;
    case 'secresponsebodylimitaction':
      config.responseBodyLimitAction = /^reject$/i.test(arg) ? 'Reject' : /^processpartial$/i.test(arg) ? 'ProcessPartial' : fail();
      return;
    case 'secpcrematchlimit':
    case 'secpcrematchlimitrecursion':
      config.pcreMatchLimit = int();
      return;
    case 'secargumentseparator':
      if (arg.length !== 1) throw new Error('Argument separator should be set to a single character.');
      config.argumentSeparator = arg;
      return;
    case 'secargumentslimit':
      config.argumentsLimit = int();
      return;
    case 'seccomponentsignature':
      config.components.push(arg);
      return;
    case 'seccookieformat':
      if (arg !== '0') throw new Error('only SecCookieFormat 0 is supported');
      return;
    case 'secconnengine':
      if (/^on$/i.test(arg)) throw new Error('SecConnEngine is not yet supported.');
      return;
    case 'secunicodemapfile':
      throw new Error('SecUnicodeMapFile is not supported by the compiled engine');
    case 'secruleremovebyid':
      for (const part of d.args.join(' ').split(/\s+/)) {
        if (part === '') continue;
        const m = /^(\d+)(?:-(\d+))?$/.exec(part);
        if (!m) throw new Error(`SecRuleRemoveById: bad id ${part}`);
        if (m[2] !== undefined) acc.removedRanges.push([Number(m[1]), Number(m[2])]);
        else acc.removedIds.add(Number(m[1]));
      }
      return;
    case 'secruleremovebytag':
      acc.removedTags.push(arg);
      return;
    case 'secruleremovebymsg':
      acc.removedMsgs.push(arg);
      return;
    case 'secruleupdatetargetbyid':
    case 'secruleupdatetargetbytag':
    case 'secruleupdatetargetbymsg': {
      const selector = arg;
      const targets = splitVariables(d.args[1] ?? '').map(parseVariable);
      if (targets.length === 0) throw new Error(`${d.name} needs targets`);
      const run = (ctx: UpdateContext): void => {
        let rules: CompiledRule[];
        if (d.name === 'secruleupdatetargetbyid') {
          const ids = new Set<number>();
          for (const part of selector.split(/[\s,]+/)) {
            const m = /^(\d+)(?:-(\d+))?$/.exec(part);
            if (!m) continue;
            if (m[2] === undefined) ids.add(Number(m[1]));
            else for (let k = Number(m[1]); k <= Number(m[2]); k++) ids.add(k);
          }
          rules = [...ids].map((id) => ctx.rulesById.get(id)).filter((r): r is CompiledRule => r !== undefined);
        } else if (d.name === 'secruleupdatetargetbytag') {
          rules = ctx.allRules.filter((r) => r.id !== 0 && r.tagTexts.includes(selector));
        } else {
          rules = ctx.allRules.filter((r) => r.id !== 0 && r.msg?.text === selector);
        }
        for (const rule of rules) {
          for (const t of targets) {
            if (t.exclude) {
              const ex: UpdateExclusion = {
                fullName: t.keyRegex !== undefined ? `${t.collection}:regex(${t.keyRegex})` : t.key !== undefined ? `${t.collection}:${t.key}` : t.collection,
                ...(t.keyRegex !== undefined ? { re: compileKeyRegex(t.keyRegex) } : {}),
              };
              rule.exclusions.push(ex);
            } else rule.additions.push(compileVariable(t, []));
          }
        }
      };
      acc.updates.push({ directive: d, run: run as unknown as () => void });
      return;
    }
    case 'secruleupdateactionbyid':
      throw new Error('SecRuleUpdateActionById is not supported by the compiled engine');
    default:
      // audit log, debug log, directories, collection timeout, web app id ...: no effect here
      return;
  }
  function fail(): never {
    throw new Error(`${d.name}: bad value ${arg}`);
  }
}
