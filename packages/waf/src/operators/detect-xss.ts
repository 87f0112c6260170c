/** @detectXSS: libinjection's XSS detection (@tps/libinjection); with `capture`, the value goes to TX:0. */
import { detectXss } from '@tps/libinjection';
import type { OperatorDefinition } from './registry.ts';

export const detectXssOperator: OperatorDefinition = {
  names: ['detectxss'],
  create: ({ base }) => ({
    ...base,
    run(tx, rule, input) {
      if (!detectXss(input)) return false;
      if (rule.capture) tx.setCapture(0, input);
      return true;
    },
  }),
};
