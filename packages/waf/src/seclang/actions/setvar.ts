/**
 * setvar: set, increment, decrement or remove a variable of TX (or IP, GLOBAL ... which last one
 * transaction here), as ModSecurity's SetVar: `setvar:tx.score=+%{tx.critical_anomaly_score}`.
 * Runs on every matched value (ModSecurity's executeActionsIndependentOfChainedRuleResult).
 */
import { lowerAscii } from '../../ascii.ts';
import { stoi } from '../../operators/numeric.ts';
import type { TransactionCollections } from '../../transaction/collections.ts';
import { expand } from '../../transaction/macros.ts';
import { knownTxSlot, txSlot } from '../../transaction/tx-store.ts';
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
  const lowerName = name.text !== undefined ? lowerAscii(name.text) : undefined;
  return {
    collection,
    name,
    lowerName,
    txSlot: collection === 'TX' && lowerName !== undefined ? txSlot(lowerName) : -1,
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
  if (sv.collection === 'TX') {
    runTxSetVar(tx, sv, pre, rule);
    return;
  }
  const name = expand(tx, sv.name, rule);
  const lk = sv.lowerName ?? lowerAscii(name);
  const coll = tx.collection(sv.collection);
  switch (sv.op) {
    case 'unset':
      coll.delete(lk);
      return;
    case 'set':
      tx.storeIn(coll, name, lk, pre);
      return;
    case 'one':
      tx.storeIn(coll, name, lk, '1');
      return;
    default: {
      const cur = coll.get(lk);
      const result = arithmetic(sv, pre, cur?.value);
      if (cur !== undefined) tx.update(cur, result);
      else tx.storeIn(coll, name, lk, result);
    }
  }
}

/** runSetVar on TX: a constant name by its slot (SetVarAction.txSlot), a macro-made one by its key. */
function runTxSetVar(tx: TransactionCollections, sv: SetVarAction, pre: string, rule: CompiledRule): void {
  const store = tx.txStore;
  let slot = sv.txSlot;
  let name: string;
  let lk: string;
  if (slot >= 0) {
    name = sv.name.text!;
    lk = sv.lowerName!;
  } else {
    name = expand(tx, sv.name, rule);
    lk = lowerAscii(name);
    slot = knownTxSlot(lk);
  }
  switch (sv.op) {
    case 'unset':
      store.delete(slot, lk);
      return;
    case 'set':
      store.store(slot, name, lk, pre);
      return;
    case 'one':
      store.store(slot, name, lk, '1');
      return;
    default: {
      // (the variable at hand: the CRS's score increments, one per matched value, look it up once)
      const cur = store.find(slot, lk);
      const result = arithmetic(sv, pre, cur?.value);
      if (cur !== undefined) tx.update(cur, result);
      else store.insert(slot, { key: name, lowerKey: lk, value: result, box: undefined, entry: undefined });
    }
  }
}

/** `=+n` / `=-n`: the current value (0 when unset) plus or minus n, as std::stoi reads both. */
function arithmetic(sv: SetVarAction, operand: string, current: string | undefined): string {
  const p = stoi(operand);
  const value = current !== undefined ? stoi(current) : 0;
  return String(sv.op === 'add' ? value + p : value - p);
}
