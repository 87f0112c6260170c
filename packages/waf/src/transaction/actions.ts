/**
 * When a rule's actions run, as ModSecurity v3.0.9's RuleWithActions does: on each matched value
 * the setvars (executeActionsIndependentOfChainedRuleResult), and a multiMatch rule's message;
 * after a full match (the rule and its chain) the phase's default actions, the rule's metadata,
 * its run-time actions in order, and its disruptive action (executeActionsAfterFullMatch). Each
 * action's own effect is its module's in seclang/actions/.
 */
import { runRuntimeAction } from '../seclang/actions/index.ts';
import { runDisruptive } from '../seclang/actions/disruptive.ts';
import { applyMatchMetadata, applyMetadata } from '../seclang/actions/metadata.ts';
import { runSetVar } from '../seclang/actions/setvar.ts';
import type { CompiledRule } from '../seclang/program.ts';
import type { TransactionLiteralCache } from './literal-cache.ts';
import type { MutableMessage } from './messages.ts';

/** The actions of a matched value: its setvars, and a multiMatch rule's message (not a chain's). */
export function actionsOnMatch(tx: TransactionLiteralCache, rule: CompiledRule, msg: MutableMessage): void {
  for (const sv of rule.setvars) runSetVar(tx, sv, rule);
  if (rule.multiMatch && !rule.chained) applyMatchMetadata(tx, rule, msg);
}

/** RuleWithActions::executeActionsAfterFullMatch. */
export function actionsAfterFullMatch(tx: TransactionLiteralCache, rule: CompiledRule, msg: MutableMessage): void {
  const defaults = tx.rs.defaults[rule.phase];
  if (defaults) for (const a of defaults.runtime) runRuntimeAction(tx, a, rule, msg, defaults.disruptive);
  applyMetadata(tx, rule, msg);
  for (const a of rule.runtime) runRuntimeAction(tx, a, rule, msg, defaults?.disruptive);
  if (rule.disruptive !== undefined && tx.engineState() === 'On') runDisruptive(tx, rule.disruptive, rule, msg);
}
