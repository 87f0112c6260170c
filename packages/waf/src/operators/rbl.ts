/**
 * @rbl: DNS block lists are not queried: never a match (the CRS runs @rbl only when an operator
 * configures tx.block_* reputation lists).
 */
import type { OperatorDefinition } from './registry.ts';

export const rblOperator: OperatorDefinition = {
  names: ['rbl'],
  create: ({ base }) => ({ ...base, run: () => false }),
};
