/** @beginsWith: the value starts with the parameter. */
import type { OperatorDefinition } from './registry.ts';

export const beginsWithOperator: OperatorDefinition = {
  names: ['beginswith'],
  create: ({ base, paramOf }) => ({ ...base, run: (tx, _r, input) => input.startsWith(paramOf(tx)) }),
};
