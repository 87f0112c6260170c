/**
 * Actions on persistent collections and the environment: setenv (ENV), initcol (its value is
 * expanded; IP, GLOBAL and RESOURCE last one transaction here), and expirevar, setuid, setsid,
 * setrsc, accepted without effect on a single transaction's verdict.
 */
import type { TransactionCollections } from '../../transaction/collections.ts';
import { expand } from '../../transaction/macros.ts';
import { compileExpand } from '../macros.ts';
import type { CompiledRule, Expand } from '../program.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

export const parseInitcolAction: ActionParser = (action, out) => {
  const v = actionValue(action);
  const eq = v.indexOf('=');
  if (eq < 0) throw new Error('initcol: missing =');
  const coll = v.slice(0, eq).toLowerCase();
  if (coll !== 'ip' && coll !== 'global' && coll !== 'resource') throw new Error(`initcol: unsupported collection ${coll}`);
  out.runtime.push({ kind: 'initcol', collection: coll.toUpperCase(), value: compileExpand(v.slice(eq + 1)) });
};

export const parseSetenvAction: ActionParser = (action, out) => {
  const v = actionValue(action);
  const unset = v.startsWith('!');
  const body = unset ? v.slice(1) : v;
  const eq = body.indexOf('=');
  out.runtime.push({
    kind: 'setenv',
    unset,
    name: compileExpand(eq < 0 ? body : body.slice(0, eq)),
    value: eq < 0 ? undefined : compileExpand(body.slice(eq + 1)),
  });
};

export function runInitcol(tx: TransactionCollections, value: Expand, rule: CompiledRule): void {
  expand(tx, value, rule);
}

export function runSetenv(tx: TransactionCollections, name: Expand, value: Expand | undefined, unset: boolean, rule: CompiledRule): void {
  const key = expand(tx, name, rule);
  if (unset) tx.env.delete(key);
  else tx.env.set(key, value ? expand(tx, value, rule) : '1');
}

/** expirevar, setuid, setsid, setrsc and the audit-log ones (sanitise*), xmlns: accepted, no effect on verdicts. */
export const parseNoEffectAction: ActionParser = (_action, out) => {
  // persistent collections and audit-log sanitising are not part of this engine
  out.runtime.push({ kind: 'noop' });
};
