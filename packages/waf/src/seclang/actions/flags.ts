/**
 * Flags that change how a rule is evaluated, read by the rule loop and the operators: chain (the
 * next rule must match too), multiMatch (the operator runs on the value after each
 * transformation that changed it), capture (the operator's groups go to TX:0-9).
 */
import type { ActionParser } from './parsed.ts';

export const parseFlagAction: ActionParser = (action, out) => {
  if (action.name === 'chain') out.chain = true;
  else if (action.name === 'multimatch') out.multiMatch = true;
  else out.capture = true;
};
