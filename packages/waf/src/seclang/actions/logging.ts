/** log, nolog, auditlog, noauditlog: whether a match is logged (the last one of them in the rule's actions, its phase's defaults first). */
import type { MutableMessage } from '../../transaction/messages.ts';
import type { ActionParser } from './parsed.ts';

export const parseLoggingAction: ActionParser = (action, out) => {
  out.runtime.push({ kind: action.name as 'log' | 'nolog' | 'auditlog' | 'noauditlog' });
};

export function runLogging(msg: MutableMessage, kind: 'log' | 'nolog' | 'auditlog' | 'noauditlog'): void {
  msg.save = kind === 'log' || kind === 'auditlog';
}
