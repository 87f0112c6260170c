/** RULE:id, RULE:msg, RULE:severity ...: a property of the rule being evaluated (of its chain starter when the rule itself has none). */
import type { CompiledRule } from '../seclang/program.ts';
import type { TransactionCollections } from '../transaction/collections.ts';
import { expand } from '../transaction/macros.ts';

export function ruleValue(tx: TransactionCollections, rule: CompiledRule | undefined, what: string): string | undefined {
  let r = rule;
  switch (what) {
    case 'id':
      while (r && r.id === 0) r = r.parent;
      return r && r.id !== 0 ? String(r.id) : undefined;
    case 'rev':
      if (!rule) return undefined;
      while (r && r.rev === '') r = r.parent;
      return r ? r.rev : undefined;
    case 'severity':
      if (!rule) return undefined;
      while (r && r.severity === undefined) r = r.parent;
      return r && r.severity !== undefined ? String(r.severity) : undefined;
    case 'logdata':
      if (!rule) return undefined;
      while (r && r.logdata === undefined) r = r.parent;
      return r?.logdata ? expand(tx, r.logdata, undefined) : undefined;
    case 'msg':
      if (!rule) return undefined;
      while (r && r.msg === undefined) r = r.parent;
      return r?.msg ? expand(tx, r.msg, undefined) : undefined;
    case 'ver':
      if (!rule) return undefined;
      while (r && r.ver === '') r = r.parent;
      return r ? r.ver : undefined;
    default:
      return undefined;
  }
}
