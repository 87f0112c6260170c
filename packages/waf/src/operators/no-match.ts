/** @noMatch: no value matches. */
import type { OperatorDefinition } from './registry.ts';

export const noMatchOperator: OperatorDefinition = {
  names: ['nomatch'],
  create: ({ base }) => ({ ...base, run: () => false }),
};
