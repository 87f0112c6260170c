/** @detectSQLi: libinjection's SQLi detection (@tps/libinjection); with `capture`, the fingerprint goes to TX:0. */
import { detectSqli } from '@tps/libinjection';
import type { OperatorDefinition } from './registry.ts';

export const detectSqliOperator: OperatorDefinition = {
  names: ['detectsqli'],
  create: ({ base }) => ({
    ...base,
    run(tx, rule, input) {
      const fp = detectSqli(input);
      if (fp === null) return false;
      if (rule.capture) tx.setCapture(0, fp);
      return true;
    },
  }),
};
