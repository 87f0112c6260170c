/**
 * Macro expansion at run time: `%{tx.score}`, `%{MATCHED_VAR}`, `%{rule.msg}` in a compiled
 * string (seclang/macros.ts compiles them) read from the transaction. %{tx.x} and single
 * variables are read directly (the CRS's setvars are full of them); the others through their
 * variable's resolver, first value.
 */
import { READ_SINGLE, READ_TX_KEY } from '../seclang/program.ts';
import type { CompiledRule, Expand } from '../seclang/program.ts';
import type { TransactionCollections } from './collections.ts';
import type { Entry } from './value-cache.ts';

export function expand(tx: TransactionCollections, e: Expand, rule: CompiledRule | undefined): string {
  if (e.text !== undefined) return e.text;
  let out = '';
  for (const part of e.parts!) {
    if (typeof part === 'string') {
      out += part;
      continue;
    }
    const direct = part.resolver.direct;
    if (direct !== undefined && direct.kind === READ_TX_KEY) {
      const v = tx.txStore.find(direct.slot, direct.lowerKey);
      if (v !== undefined) out += v.value;
      continue;
    }
    if (direct !== undefined && direct.kind === READ_SINGLE) {
      out += tx.singleValue(direct.slot, direct.name);
      continue;
    }
    const values: Entry[] = [];
    part.resolver.resolve(tx, rule, values);
    if (values.length > 0) out += values[0]!.box.v;
  }
  return out;
}
