/** status: the HTTP status of the intervention a disruptive action asks for (deny's default is 403). */
import type { TransactionCollections } from '../../transaction/collections.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

export const parseStatusAction: ActionParser = (action, out) => {
  const v = actionValue(action);
  if (!/^\d+$/.test(v)) throw new Error(`bad status ${v}`);
  out.runtime.push({ kind: 'status', status: Number(v) });
};

export function runStatus(tx: TransactionCollections, status: number): void {
  tx.intervention.status = status;
}
