/** @contains: the parameter occurs in the value. */
import type { OperatorDefinition } from './registry.ts';

export const containsOperator: OperatorDefinition = {
  names: ['contains'],
  create: ({ base, paramOf }) => ({ ...base, run: (tx, _r, input) => input.indexOf(paramOf(tx)) >= 0 }),
};
