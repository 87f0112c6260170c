/** @eq: a numeric comparison with ModSecurity's conversions (numeric-operator.ts). */
import { numericOperator } from './numeric-operator.ts';

export const eqOperator = numericOperator('eq');
