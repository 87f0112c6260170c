/**
 * SecLang operators with ModSecurity v3.0.9's semantics: one module per operator (its
 * definition: names, parameter checks, the operator of one rule), registered here by name
 * (registry.ts). compileOperator() builds a rule's operator; an operator not registered, or
 * disabled for the rule set, is a load error.
 */
import { beginsWithOperator } from './begins-with.ts';
import { containsWordOperator } from './contains-word.ts';
import { containsOperator } from './contains.ts';
import { detectSqliOperator } from './detect-sqli.ts';
import { detectXssOperator } from './detect-xss.ts';
import { endsWithOperator } from './ends-with.ts';
import { eqOperator } from './eq.ts';
import { geOperator } from './ge.ts';
import { geoLookupOperator } from './geo-lookup.ts';
import { gtOperator } from './gt.ts';
import { ipMatchFromFileOperator } from './ip-match-from-file.ts';
import { ipMatchOperator } from './ip-match.ts';
import { leOperator } from './le.ts';
import { ltOperator } from './lt.ts';
import { noMatchOperator } from './no-match.ts';
import { pmFromFileOperator } from './pm-from-file.ts';
import { pmOperator } from './pm.ts';
import { rblOperator } from './rbl.ts';
import { registerOperator } from './registry.ts';
import type { OperatorDefinition } from './registry.ts';
import { rxOperator } from './rx.ts';
import { streqOperator } from './streq.ts';
import { unconditionalMatchOperator } from './unconditional-match.ts';
import { validateByteRangeOperator } from './validate-byte-range.ts';
import { validateUrlEncodingOperator } from './validate-url-encoding.ts';
import { validateUtf8EncodingOperator } from './validate-utf8-encoding.ts';
import { withinOperator } from './within.ts';

/** The operators this engine has. */
export const BUILT_IN_OPERATORS: readonly OperatorDefinition[] = [
  rxOperator,
  pmOperator,
  pmFromFileOperator,
  withinOperator,
  containsOperator,
  containsWordOperator,
  streqOperator,
  beginsWithOperator,
  endsWithOperator,
  eqOperator,
  geOperator,
  gtOperator,
  leOperator,
  ltOperator,
  ipMatchOperator,
  ipMatchFromFileOperator,
  validateByteRangeOperator,
  validateUrlEncodingOperator,
  validateUtf8EncodingOperator,
  detectSqliOperator,
  detectXssOperator,
  unconditionalMatchOperator,
  noMatchOperator,
  rblOperator,
  geoLookupOperator,
];
for (const operator of BUILT_IN_OPERATORS) registerOperator(operator);

export { compileOperator, isOperator, registerOperator } from './registry.ts';
export type { OperatorContext, OperatorDefinition, OperatorOptions } from './registry.ts';
export { atoll, compareNumeric, stoi } from './numeric.ts';
export { containsAny, runRegex } from './rx.ts';
export { parsePmContent } from './pm.ts';
export { pmFileLines } from './pm-from-file.ts';
export { validateUrlEncoding } from './validate-url-encoding.ts';
export { invalidUtf8 } from './validate-utf8-encoding.ts';
