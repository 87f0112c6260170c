/** @pmFromFile (and its short name @pmf): @pm with the phrases of one or more files, one per line. */
import { readFileSync } from 'node:fs';
import { resolveDataFile } from './data-files.ts';
import { phraseOperator } from './pm.ts';
import type { OperatorDefinition } from './registry.ts';

/** Lines of a @pmFromFile file: not blank, not a comment (# after optional blanks). */
export function pmFileLines(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    if (line.length === 0) continue;
    const hash = line.indexOf('#');
    if (hash >= 0 && /^[\t-\r ]*$/.test(line.slice(0, hash))) continue;
    out.push(line);
  }
  return out;
}

export const pmFromFileOperator: OperatorDefinition = {
  names: ['pmfromfile', 'pmf'],
  create({ base, param, context }) {
    const patterns: string[] = [];
    for (const f of param.trim().split(/\s+/)) patterns.push(...pmFileLines(readFileSync(resolveDataFile(f, context.file), 'latin1')));
    return phraseOperator(base, patterns);
  },
};
