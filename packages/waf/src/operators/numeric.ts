/**
 * Numbers as ModSecurity's numeric operators read them (C atoll(), C++ std::stoi()), and the
 * comparison of @eq, @ge, @gt, @le and @lt, which the rule loop also runs itself for a static
 * operand (CompiledOperator.numeric).
 */
/** Leading blanks, optional sign, digits (C strtol-style prefix). */
function parseIntPrefix(s: string): { neg: boolean; digits: string } | undefined {
  let i = 0;
  const n = s.length;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === 0x20 || (c >= 0x09 && c <= 0x0d)) i++;
    else break;
  }
  let neg = false;
  if (i < n && (s.charCodeAt(i) === 0x2d || s.charCodeAt(i) === 0x2b)) {
    neg = s.charCodeAt(i) === 0x2d;
    i++;
  }
  const start = i;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) i++;
    else break;
  }
  if (i === start) return undefined;
  return { neg, digits: s.slice(start, i) };
}

/**
 * The value of a string of 1-9 decimal digits and nothing else (the usual operand: a score, a
 * paranoia level), or -1: then atoll and stoi parse it the long way. Fewer than 10 digits is
 * within both int ranges.
 */
function plainSmallNumber(s: string): number {
  if (s.length === 0 || s.length >= 10) return -1;
  let v = 0;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c < 0x30 || c > 0x39) return -1;
    v = v * 10 + (c - 0x30);
  }
  return v;
}

/** C atoll(): leading blanks, sign, digits; 0 when none; saturates. */
export function atoll(s: string): number {
  const plain = plainSmallNumber(s);
  if (plain >= 0) return plain;
  const p = parseIntPrefix(s);
  if (!p) return 0;
  const v = Number(p.digits);
  // INT64_MAX as a double (2^63, its nearest): ModSecurity compares numbers as int64.
  const clamped = Math.min(v, 2 ** 63);
  return p.neg ? -clamped : clamped;
}

/** C++ std::stoi(): like atoll but 0 when out of int range (the exception ModSecurity catches). */
export function stoi(s: string): number {
  const plain = plainSmallNumber(s);
  if (plain >= 0) return plain;
  const p = parseIntPrefix(s);
  if (!p) return 0;
  const v = Number((p.neg ? '-' : '') + p.digits);
  if (v > 2147483647 || v < -2147483648) return 0;
  return v;
}

/** CompiledOperator.numeric (and the TxCheck's copy): which comparison a static numeric operator makes (0: not one). */
const NUMERIC_EQ = 1;
const NUMERIC_GE = 2;
const NUMERIC_GT = 3;
const NUMERIC_LE = 4;
const NUMERIC_LT = 5;
export const NUMERIC_CODES: Readonly<Record<string, number>> = {
  eq: NUMERIC_EQ,
  ge: NUMERIC_GE,
  gt: NUMERIC_GT,
  le: NUMERIC_LE,
  lt: NUMERIC_LT,
};

/** CompiledOperator.numeric and .operand of an operator: a numeric one with a static operand, converted once. */
export function numericComparison(name: string, staticParam: string | undefined): { numeric: number; operand: number } {
  const numeric = NUMERIC_CODES[name] ?? 0;
  if (numeric === 0 || staticParam === undefined) return { numeric: 0, operand: 0 };
  return { numeric, operand: numericOperand(numeric, staticParam) };
}

/** A numeric operator's operand as ModSecurity converts it: std::stoi for @eq, atoll for the others. */
export function numericOperand(numeric: number, param: string): number {
  return numeric === NUMERIC_EQ ? stoi(param) : atoll(param);
}

/** Whether `value` passes a numeric comparison (CompiledOperator.numeric), before negation: the operator's run(). */
export function compareNumeric(numeric: number, operand: number, value: string): boolean {
  switch (numeric) {
    case NUMERIC_EQ:
      return stoi(value) === operand;
    case NUMERIC_GE:
      return atoll(value) >= operand;
    case NUMERIC_GT:
      return atoll(value) > operand;
    case NUMERIC_LE:
      return atoll(value) <= operand;
    default:
      return atoll(value) < operand;
  }
}
