/** @streq: the value is the parameter. */
import type { OperatorDefinition } from './registry.ts';

export const streqOperator: OperatorDefinition = {
  names: ['streq'],
  create: ({ base, paramOf }) => ({ ...base, run: (tx, _r, input) => input === paramOf(tx) }),
};
