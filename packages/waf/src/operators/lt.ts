/** @lt: a numeric comparison with ModSecurity's conversions (numeric-operator.ts). */
import { numericOperator } from './numeric-operator.ts';

export const ltOperator = numericOperator('lt');
