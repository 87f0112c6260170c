/**
 * SecLang directives to a CompiledRuleSet, once. Every rule is checked here: an unknown
 * variable, operator or action, a pattern that cannot be translated, a duplicated id, a chain
 * without its child: all are load errors naming file and line, never a rule silently skipped.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { compileOperator } from '../operators/index.ts';
import { buildLiteralPrefilters, phasePrefilters } from '../prefilter/literal-prefilter.ts';
import { isComputedSingle } from '../transaction/collections.ts';
import { expand } from '../transaction/macros.ts';
import { literalEffect } from '../transformations/byte-kinds.ts';
import { TransformationTrie } from '../transformations/trie.ts';
import type { TransformationNode } from '../transformations/trie.ts';
import { compileVariable, fullRequestReadsCompiled, keyExclusionsFor } from '../variables/resolvers.ts';
import { parseActionList } from './actions/index.ts';
import type { ActionParseContext } from './actions/index.ts';
import { applyConfig } from './directives.ts';
import type { RuleChanges, UpdateContext } from './directives.ts';
import { defaultConfig } from './engine-config.ts';
import { compileExpand } from './macros.ts';
import { parseSecLang, SecLangError } from './parser.ts';
import type { Directive } from './parser.ts';
import { LIST_COLLECTIONS, READ_FILTERED, READ_LIST, READ_NAMES, READ_RESOLVE, READ_SINGLE, READ_TX_KEY, READ_XML } from './program.ts';
import type {
  CompiledRule,
  CompiledRuleSet,
  DefaultActions,
  DisruptiveAction,
  PhaseEntry,
  RuntimeAction,
  VarRef,
  VarResolver,
} from './program.ts';
import { txCheckOf, txGateOf } from './tx-check.ts';

/** One piece of SecLang to load (the shape of rule-set.ts's RulesSource). */
export type CompileSource = { readonly text: string; readonly name: string } | { readonly file: string };

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

/** Options of compileRuleSet. */
export interface CompileOptions {
  /** Called for each loaded rule file (for tests/tools). */
  readonly onFile?: (file: string) => void;
  /** Literal prefilters (literal-prefilter.ts); default true. */
  readonly prefilter?: boolean;
  /** Plain TX checks run by the loop's short path (program.ts, TxCheck); default true. */
  readonly txChecks?: boolean;
  /** Operators the rule set may not use (a rule with one is a load error), as Coraza's disabled_operators build tags. */
  readonly disabledOperators?: readonly string[];
}

export function readRulesFile(file: string): Directive[] {
  const text = readFileSync(file, 'latin1');
  return parseSecLang(text, file, (path, from) => {
    const target = isAbsolute(path) ? path : join(dirname(from), path);
    return readRulesFile(target);
  });
}

export function compileRuleSet(sources: readonly CompileSource[], options: CompileOptions = {}): CompiledRuleSet {
  const fullRequestReadsBefore = fullRequestReadsCompiled();
  const config = defaultConfig();
  const phases: PhaseEntry[][] = [[], [], [], [], [], []];
  const defaults: { runtime: RuntimeAction[]; transformations: string[]; disruptive: DisruptiveAction[] }[] = Array.from(
    { length: 6 },
    () => ({
      runtime: [],
      transformations: [],
      disruptive: [],
    }),
  );
  const trie = new TransformationTrie();
  const rulesById = new Map<number, CompiledRule>();
  const allRules: CompiledRule[] = [];
  const markerNames = new Map<string, string>();
  const actionContext: ActionParseContext = { markerName: (name) => markerName(markerNames, name) };
  const changes: RuleChanges = { removedIds: new Set(), removedRanges: [], removedTags: [], removedMsgs: [], updates: [], sourceName: '' };
  const { removedIds, removedRanges, removedTags, removedMsgs, updates } = changes;
  let ruleCount = 0;
  const opContext = {
    compileExpand,
    expand,
    disabled: options.disabledOperators !== undefined ? new Set(options.disabledOperators.map((name) => name.toLowerCase())) : undefined,
  };

  for (const source of sources) {
    let directives: Directive[];
    const sourceName = 'file' in source ? source.file : source.name;
    if ('file' in source) {
      options.onFile?.(source.file);
      directives = readRulesFile(source.file);
    } else {
      directives = parseSecLang(source.text, source.name, (path, from) =>
        readRulesFile(isAbsolute(path) ? path : join(dirname(from), path)),
      );
    }
    // per source ("driver"): last rule for chaining, SecDefaultAction once per phase
    let lastRule: CompiledRule | undefined;
    const defaultPhasesSeen = new Set<number>();
    for (const d of directives) {
      try {
        switch (d.kind) {
          case 'rule':
          case 'action': {
            const parsed = parseActionList(d.actions, actionContext);
            const isChild = d.kind === 'rule' && lastRule !== undefined && lastRule.chained && lastRule.child === undefined;
            let variables: VarResolver[] = [];
            if (d.kind === 'rule') {
              const excludes = d.variables.filter((v) => v.exclude);
              const plain = d.variables.filter((v) => !v.exclude);
              // ModSecurity drops a variable that is also excluded as a whole (ARGS:x|!ARGS:x).
              const kept = plain.filter(
                (v) =>
                  !excludes.some(
                    (x) => x.collection === v.collection && x.key === v.key && x.keyRegex === v.keyRegex && x.count === v.count,
                  ),
              );
              variables = kept.map((v) => compileVariable(v, keyExclusionsFor(v.collection, excludes)));
            }
            const operator = d.kind === 'rule' ? compileOperator(d.operator, { ...opContext, file: d.file }) : undefined;
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
              staticTags:
                parsed.tags.length > 0 && parsed.tags.every((t) => t.text !== undefined) ? parsed.tags.map((t) => t.text!) : undefined,
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
            const parsed = parseActionList(d.actions, actionContext);
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
            changes.sourceName = sourceName;
            applyConfig(d, config, changes);
            break;
        }
      } catch (error) {
        if (error instanceof SecLangError) throw error;
        throw new SecLangError(d.file, d.line, (error as Error).message);
      }
    }
    if (lastRule?.chained && lastRule.child === undefined) {
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
      u.run(ctx);
    } catch (error) {
      throw new SecLangError(u.directive.file, u.directive.line, (error as Error).message);
    }
  }
  const slots = new Map<string, number>();
  for (const rule of allRules)
    rule.refs = [...rule.variables.map((v) => varRef(v, true, slots)), ...rule.additions.map((v) => varRef(v, false, slots))];
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
  if (options.txChecks !== false) for (const rule of allRules) rule.txCheck = txCheckOf(rule, defaults[rule.phase]);
  return {
    config,
    phases,
    markerIndex,
    transformations: trie.nodes,
    transformationKinds: trie.kinds.length,
    prefilter,
    phasePrefilters: phasePrefilters(phases),
    phaseTxChecks: phases.map((list) => list.map((entry) => entry.rule?.txCheck)),
    phaseTxGates: phases.map((list) =>
      list.map((entry) => (entry.rule !== undefined && options.txChecks !== false ? txGateOf(entry.rule) : undefined)),
    ),
    phaseRules: phases.map((list) => list.map((entry) => entry.rule)),
    phaseMarkers: phases.map((list) => list.map((entry) => entry.marker)),
    phaseMarkerRunEnds: phases.map(markerRunEnds),
    defaults: defaults as DefaultActions[],
    removedIds,
    removedRanges,
    removedTags,
    removedMsgs,
    removesRules: removedIds.size > 0 || removedRanges.length > 0 || removedTags.length > 0 || removedMsgs.length > 0,
    ruleCount,
    rulesById,
    filteredSlots: slots.size,
    readsFullRequest: fullRequestReadsCompiled() > fullRequestReadsBefore,
  };
}

/** CompiledRuleSet.phaseMarkerRunEnds of one phase. */
function markerRunEnds(list: readonly PhaseEntry[]): Int32Array {
  const ends = new Int32Array(list.length).fill(-1);
  for (let k = list.length - 1; k >= 0; k--) {
    if (list[k]!.marker === undefined) continue;
    ends[k] = k + 1 < list.length && list[k + 1]!.marker !== undefined ? ends[k + 1]! : k;
  }
  return ends;
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
      return { ...base, kind: d.kind, index: d.slot, name: d.lowerKey, key: d.key };
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
