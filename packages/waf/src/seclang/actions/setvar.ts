/**
 * setvar: set, increment, decrement or remove a variable of TX (or IP, GLOBAL ... which last one
 * transaction here), as ModSecurity's SetVar: `setvar:tx.score=+%{tx.critical_anomaly_score}`.
 * Runs on every matched value (ModSecurity's executeActionsIndependentOfChainedRuleResult).
 */
import { lowerAscii } from '../../ascii.ts';
import { stoi } from '../../operators/numeric.ts';
import type { TransactionCollections } from '../../transaction/collections.ts';
import { expand } from '../../transaction/macros.ts';
import { compileExpand } from '../macros.ts';
import type { CompiledRule, SetVarAction } from '../program.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

const COLLECTIONS = ['TX', 'IP', 'GLOBAL', 'SESSION', 'USER', 'RESOURCE'];

export function parseSetVar(value: string): SetVarAction {
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
  if (!COLLECTIONS.includes(collection)) throw new Error(`setvar: unsupported collection ${collection}`);
  const name = compileExpand(text.slice(cut + 1));
  return {
    collection,
    name,
    lowerName: name.text !== undefined ? lowerAscii(name.text) : undefined,
    op,
    ...(valueText !== undefined ? { value: compileExpand(valueText) } : {}),
  };
}

export const parseSetVarAction: ActionParser = (action, out) => {
  out.setvars.push(parseSetVar(actionValue(action)));
};

/** SetVar::evaluate. */
export function runSetVar(tx: TransactionCollections, sv: SetVarAction, rule: CompiledRule): void {
  const pre = sv.value ? expand(tx, sv.value, rule) : '';
  const name = expand(tx, sv.name, rule);
  const lk = sv.lowerName ?? lowerAscii(name);
  const coll = sv.collection === 'TX' ? tx.txStore : tx.collection(sv.collection);
  switch (sv.op) {
    case 'unset': {
      if (coll.delete(lk) && coll === tx.txStore) {
        const slot = tx.txKeySlots.get(lk);
        if (slot !== undefined) tx.txSlotVars[slot] = undefined;
      }
      return;
    }
    case 'set':
      tx.storeIn(coll, name, lk, pre);
      return;
    case 'one':
      tx.storeIn(coll, name, lk, '1');
      return;
    default: {
      const p = stoi(pre);
      const cur = coll.get(lk);
      const value = cur ? stoi(cur.value) : 0;
      const result = String(sv.op === 'add' ? value + p : value - p);
      // (the variable at hand: the CRS's score increments, one per matched value, look it up once)
      if (cur !== undefined) tx.update(cur, result);
      else tx.storeIn(coll, name, lk, result);
    }
  }
}
