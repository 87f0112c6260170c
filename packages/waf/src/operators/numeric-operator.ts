/** What @eq, @ge, @gt, @le and @lt share: their definition, a comparison of numbers as ModSecurity converts them (numeric.ts). */
import { compareNumeric, NUMERIC_CODES, numericOperand } from './numeric.ts';
import type { OperatorDefinition } from './registry.ts';

/** The definition of numeric operator `name` (eq.ts, ge.ts ...): a static operand was converted once (the CRS's paranoia gates and setting checks). */
export function numericOperator(name: 'eq' | 'ge' | 'gt' | 'le' | 'lt'): OperatorDefinition {
  return {
    names: [name],
    create({ base, paramOf }) {
      const { numeric, operand } = base;
      if (numeric !== 0) return { ...base, run: (_tx, _r, input) => compareNumeric(numeric, operand, input) };
      const code = NUMERIC_CODES[name]!;
      return { ...base, run: (tx, _r, input) => compareNumeric(code, numericOperand(code, paramOf(tx)), input) };
    },
  };
}
