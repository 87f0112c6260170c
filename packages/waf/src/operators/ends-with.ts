/** @endsWith: the value ends with the parameter. */
import type { OperatorDefinition } from './registry.ts';

export const endsWithOperator: OperatorDefinition = {
  names: ['endswith'],
  create: ({ base, paramOf }) => ({ ...base, run: (tx, _r, input) => input.endsWith(paramOf(tx)) }),
};
