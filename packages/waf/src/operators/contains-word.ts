/** @containsWord: the parameter occurs in the value between non-letters (or its ends). */
import type { OperatorDefinition } from './registry.ts';

function containsWord(str: string, target: string): boolean {
  if (target.length === 0) return true;
  if (str.length === 0) return false;
  if (str === target) return true;
  const acceptable = (pos: number): boolean => {
    if (pos < 0 || pos >= str.length) return false;
    const c = str.charCodeAt(pos);
    return !((c >= 65 && c <= 90) || (c >= 97 && c <= 122));
  };
  let pos = str.indexOf(target);
  while (pos >= 0) {
    if (pos === 0 && acceptable(target.length)) return true;
    if (pos + target.length === str.length && acceptable(pos - 1)) return true;
    if (acceptable(pos - 1) && acceptable(pos + target.length)) return true;
    pos = str.indexOf(target, pos + 1);
  }
  return false;
}

export const containsWordOperator: OperatorDefinition = {
  names: ['containsword'],
  create: ({ base, paramOf }) => ({ ...base, run: (tx, _r, input) => containsWord(input, paramOf(tx)) }),
};
