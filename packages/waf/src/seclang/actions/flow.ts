/**
 * skip and skipAfter: after a full match, the next N rules are passed over, or every entry up to
 * the marker named (SecMarker). The rule loop does the jumping (transaction/rule-loop.ts).
 */
import type { TransactionCollections } from '../../transaction/collections.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

export const parseSkipAfterAction: ActionParser = (action, out, context) => {
  out.runtime.push({ kind: 'skipAfter', marker: context.markerName(actionValue(action)) });
};

export const parseSkipAction: ActionParser = (action, out) => {
  const v = actionValue(action);
  if (!/^\d+$/.test(v)) throw new Error(`bad skip ${v}`);
  out.runtime.push({ kind: 'skip', count: Number(v) });
};

export function runSkipAfter(tx: TransactionCollections, marker: string): void {
  tx.marker = marker;
}

export function runSkip(tx: TransactionCollections, count: number): void {
  tx.skipNext = count;
}
