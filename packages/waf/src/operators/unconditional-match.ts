/** @unconditionalMatch: every value matches. */
import type { OperatorDefinition } from './registry.ts';

export const unconditionalMatchOperator: OperatorDefinition = {
  names: ['unconditionalmatch'],
  create: ({ base }) => ({ ...base, run: () => true }),
};
