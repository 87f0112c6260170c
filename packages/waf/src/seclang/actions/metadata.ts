/**
 * What a match logs and what identifies a rule: id, phase, msg, logdata, severity, tag, rev, ver
 * (maturity and accuracy are accepted). After a full match, the message takes the rule's tags,
 * severity (which also raises HIGHEST_SEVERITY), logdata and msg, macros expanded.
 */
import type { TransactionCollections } from '../../transaction/collections.ts';
import { expand } from '../../transaction/macros.ts';
import type { MutableMessage } from '../../transaction/messages.ts';
import { compileExpand } from '../macros.ts';
import type { CompiledRule } from '../program.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

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

export const parseMetadataAction: ActionParser = (action, out) => {
  switch (action.name) {
    case 'id': {
      const v = actionValue(action);
      if (!/^\d+$/.test(v)) throw new Error(`bad id ${v}`);
      out.id = Number(v);
      if (out.id === 0) throw new Error('id 0 is not allowed');
      return;
    }
    case 'phase':
      out.phase = parsePhase(actionValue(action));
      return;
    case 'tag':
      out.tags.push(compileExpand(actionValue(action)));
      out.tagTexts.push(actionValue(action));
      return;
    case 'severity': {
      const v = actionValue(action).toLowerCase();
      const n = SEVERITIES[v] ?? (/^\d+$/.test(v) ? Number(v) : undefined);
      if (n === undefined) throw new Error(`bad severity ${action.value}`);
      out.severity = n;
      return;
    }
    case 'msg':
      out.msg = compileExpand(actionValue(action));
      return;
    case 'logdata':
      out.logdata = compileExpand(actionValue(action));
      return;
    case 'rev':
      out.rev = action.value ?? '';
      return;
    case 'ver':
      out.ver = action.value ?? '';
      return;
    default:
      // maturity, accuracy
      return;
  }
};

/** The rule's severity on its message, and HIGHEST_SEVERITY. */
export function applySeverity(tx: TransactionCollections, rule: CompiledRule, msg: MutableMessage): void {
  msg.severity = rule.severity;
  if (rule.severity !== undefined && tx.highestSeverity > rule.severity) tx.highestSeverity = rule.severity;
}

/** After a full match: the message's tags, severity, logdata and msg. */
export function applyMetadata(tx: TransactionCollections, rule: CompiledRule, msg: MutableMessage): void {
  if (rule.staticTags !== undefined && msg.tags.length === 0) msg.tags = rule.staticTags.slice();
  else for (const t of rule.tags) msg.tags.push(expand(tx, t, undefined));
  if (rule.severity !== undefined) applySeverity(tx, rule, msg);
  if (rule.logdata) msg.data = expand(tx, rule.logdata, undefined);
  if (rule.msg) msg.message = expand(tx, rule.msg, undefined);
}

/** A multiMatch rule without chain logs each matched value: its severity, logdata and msg then. */
export function applyMatchMetadata(tx: TransactionCollections, rule: CompiledRule, msg: MutableMessage): void {
  if (rule.severity !== undefined) applySeverity(tx, rule, msg);
  if (rule.logdata) msg.data = expand(tx, rule.logdata, undefined);
  if (rule.msg) msg.message = expand(tx, rule.msg, undefined);
}
