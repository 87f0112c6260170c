/**
 * The disruptive actions, as ModSecurity runs them: deny and drop (an intervention, status 403
 * unless `status` set one), redirect (302, its URL), pass (clears a pending intervention), allow
 * (lets the rest of the phase, the request, or everything but logging through), and block (the
 * phase's SecDefaultAction disruptive actions). They act only when the rule engine is On.
 */
import type { TransactionCollections } from '../../transaction/collections.ts';
import { ALLOW_ALL, ALLOW_PHASE, ALLOW_REQUEST, clearIntervention } from '../../transaction/interventions.ts';
import { expand } from '../../transaction/macros.ts';
import type { MutableMessage } from '../../transaction/messages.ts';
import { compileExpand } from '../macros.ts';
import type { CompiledRule, DisruptiveAction } from '../program.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

export const parseDisruptiveAction: ActionParser = (action, out) => {
  let disruptive: DisruptiveAction;
  switch (action.name) {
    case 'allow': {
      const v = (action.value ?? '').toLowerCase();
      disruptive = { kind: 'allow', scope: v === 'request' ? 'request' : v === 'phase' ? 'phase' : 'all' };
      break;
    }
    case 'redirect':
      disruptive = { kind: 'redirect', url: compileExpand(actionValue(action)) };
      break;
    default:
      disruptive = { kind: action.name as 'deny' | 'drop' | 'pass' };
  }
  out.disruptive = disruptive;
  out.disruptives.push(disruptive);
};

export const parseBlockAction: ActionParser = (_action, out) => {
  out.hasBlock = true;
  out.runtime.push({ kind: 'block' });
};

/** The chain starter of a rule (the one that holds its id and disruptive action). */
function topRule(rule: CompiledRule): CompiledRule {
  let r = rule;
  while (r.parent) r = r.parent;
  return r;
}

export function runDisruptive(tx: TransactionCollections, d: DisruptiveAction, rule: CompiledRule, msg: MutableMessage): void {
  const top = topRule(rule);
  const intervention = tx.intervention;
  switch (d.kind) {
    case 'deny':
    case 'drop':
      if (intervention.status === 200) intervention.status = 403;
      intervention.disruptive = true;
      intervention.ruleId = top.id;
      intervention.phase = top.phase;
      msg.disruptive = true;
      return;
    case 'redirect':
      if (intervention.status === 200 || intervention.status < 300 || intervention.status > 399) intervention.status = 302;
      intervention.url = expand(tx, d.url, rule);
      intervention.disruptive = true;
      intervention.ruleId = top.id;
      intervention.phase = top.phase;
      msg.disruptive = true;
      return;
    case 'pass':
      clearIntervention(intervention);
      return;
    case 'allow':
      tx.allowType = d.scope === 'request' ? ALLOW_REQUEST : d.scope === 'phase' ? ALLOW_PHASE : ALLOW_ALL;
      return;
  }
}

/** `block`: the phase's default disruptive actions (SecDefaultAction), when the engine is On. */
export function runBlock(
  tx: TransactionCollections,
  defaults: readonly DisruptiveAction[] | undefined,
  rule: CompiledRule,
  msg: MutableMessage,
): void {
  if (tx.engineState() !== 'On') return;
  if (defaults !== undefined) for (const d of defaults) runDisruptive(tx, d, rule, msg);
}
