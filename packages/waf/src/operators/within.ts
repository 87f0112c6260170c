/** @within: the value occurs in the parameter (an empty value always does). */
import type { OperatorDefinition } from './registry.ts';

export const withinOperator: OperatorDefinition = {
  names: ['within'],
  create: ({ base, paramOf }) => ({ ...base, run: (tx, _r, input) => input.length === 0 || paramOf(tx).indexOf(input) >= 0 }),
};
