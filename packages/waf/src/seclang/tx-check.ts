/**
 * TX checks: rules that only test one TX value (or whether a TX key exists) and log nothing, which
 * the rule loop runs from a record of their own (program.ts TxCheck): the CRS's paranoia-level
 * gates and "is this setting set?" checks, about 130 of a request's 280 rule runs.
 */
import { txSlot } from '../transaction/tx-store.ts';
import { READ_TX_KEY } from './program.ts';
import type { CompiledRule, DefaultActions, TxCheck, TxGate } from './program.ts';

const LOG_ACTIONS = new Set(['log', 'nolog', 'auditlog', 'noauditlog']);

/** The rule as a TxCheck, when it is one (program.ts). */
export function txCheckOf(rule: CompiledRule, defaults: DefaultActions | undefined): TxCheck | undefined {
  if (rule.type !== 'rule' || rule.parent !== undefined || rule.chained || rule.multiMatch || rule.capture) return undefined;
  if (rule.refs.length > 2 || rule.exclusions.length > 0 || rule.tnode !== 0 || rule.operator === undefined) return undefined;
  if (rule.tags.length > 0 || rule.severity !== undefined || rule.msg !== undefined || rule.logdata !== undefined || rule.hasBlock)
    return undefined;
  if (rule.disruptive !== undefined && rule.disruptive.kind !== 'pass') return undefined;
  const actions = [...(defaults?.runtime ?? []), ...rule.runtime];
  if (!actions.every((a) => LOG_ACTIONS.has(a.kind) || a.kind === 'skipAfter')) return undefined;
  // logs nothing: the last of log/nolog (and their audit forms) says nolog
  let save = true;
  for (const a of actions) if (LOG_ACTIONS.has(a.kind)) save = a.kind === 'log' || a.kind === 'auditlog';
  if (save) return undefined;
  const ref = rule.refs[0]!;
  const pass = rule.disruptive?.kind === 'pass';
  const op = rule.operator;
  // (skipMarker and skipTarget are set by now: compileRuleSet computes them first)
  const loop = {
    rule,
    numeric: op.numeric,
    operand: op.operand,
    negated: op.negated,
    hasSetvars: rule.setvars.length > 0,
    skipMarker: rule.skipMarker,
    skipTarget: rule.skipTarget,
  };
  const second = rule.refs[1];
  if (ref.kind === READ_TX_KEY) {
    if (second !== undefined) return undefined;
    return { lowerKey: ref.name, slot: txSlot(ref.name), count: false, matchedName: `TX:${ref.key}`, valueName: undefined, pass, ...loop };
  }
  const counted = ref.resolver.countedTxKey;
  if (counted === undefined) return undefined;
  // &TX:name|TX:name (the CRS's "exclusions for this application?" checks): the count, then the value
  if (second !== undefined && !(second.kind === READ_TX_KEY && second.name === counted)) return undefined;
  return {
    lowerKey: counted,
    slot: txSlot(counted),
    count: true,
    matchedName: ref.resolver.fullName,
    valueName: second && `TX:${second.key}`,
    pass,
    ...loop,
  };
}

/**
 * The rule's TxGate (program.ts), when it is a rule (not a TxCheck) whose one variable is a TX
 * value read as it is and compared with a static number: without that value, or with one that
 * fails the comparison, it has no value to match (exclusions and ctl removals only take values
 * away), so its effect is MATCHED_VARS cleared.
 */
export function txGateOf(rule: CompiledRule): TxGate | undefined {
  if (rule.type !== 'rule' || rule.parent !== undefined || rule.txCheck !== undefined || rule.multiMatch) return undefined;
  const op = rule.operator;
  if (op === undefined || op.numeric === 0 || rule.tnode !== 0 || rule.refs.length !== 1) return undefined;
  const ref = rule.refs[0]!;
  if (ref.kind !== READ_TX_KEY) return undefined;
  return { lowerKey: ref.name, slot: txSlot(ref.name), numeric: op.numeric, operand: op.operand, negated: op.negated };
}
