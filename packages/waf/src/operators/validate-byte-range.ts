/** @validateByteRange: matches a value with a byte outside the listed ranges (checked at load). */
import type { OperatorDefinition } from './registry.ts';

function stoiStrict(s: string): number | undefined {
  const m = /^[\t-\r ]*([+-]?\d+)/.exec(s);
  return m ? Number(m[1]) : undefined;
}

function byteRangeTable(param: string): Uint8Array {
  const table = new Uint8Array(256);
  for (const part of param.split(',')) {
    const dash = part.indexOf('-');
    const num = (t: string): number => {
      const v = stoiStrict(t);
      if (v === undefined) throw new Error(`@validateByteRange: not a number ${JSON.stringify(t)}`);
      return v;
    };
    if (dash < 0) {
      const v = num(part);
      if (v >= 0 && v <= 255) table[v] = 1;
      continue;
    }
    const start = num(part.slice(0, dash));
    const end = num(part.slice(dash + 1));
    if (start < 0 || start > 255 || end < 0 || end > 255 || start > end) throw new Error(`@validateByteRange: bad range ${part}`);
    for (let c = start; c <= end; c++) table[c] = 1;
  }
  return table;
}

export const validateByteRangeOperator: OperatorDefinition = {
  names: ['validatebyterange'],
  create({ base, param }) {
    const table = byteRangeTable(param);
    const outside: number[] = [];
    for (let c = 0; c < 256; c++) if (!table[c]) outside.push(c);
    if (outside.length === 1) {
      // 920270's 1-255: a NUL byte, found by indexOf (vectorised) rather than a loop in JS
      const only = String.fromCharCode(outside[0]!);
      return { ...base, run: (_tx, _r, input) => input.indexOf(only) >= 0 };
    }
    return {
      ...base,
      run(_tx, _r, input) {
        for (let i = 0; i < input.length; i++) if (!table[input.charCodeAt(i) & 0xff]) return true;
        return false;
      },
    };
  },
};
