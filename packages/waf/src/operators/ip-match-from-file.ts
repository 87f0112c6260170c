/** @ipMatchFromFile (and @ipMatchF): @ipMatch with the addresses of a file, one per line, # comments. */
import { readFileSync } from 'node:fs';
import { resolveDataFile } from './data-files.ts';
import { addressOperator, ipList } from './ip-match.ts';
import type { OperatorDefinition } from './registry.ts';

export const ipMatchFromFileOperator: OperatorDefinition = {
  names: ['ipmatchfromfile', 'ipmatchf'],
  create({ base, param, context }) {
    const text = readFileSync(resolveDataFile(param, context.file), 'latin1')
      .split('\n')
      .map((l) => l.replace(/#.*$/, '').trim())
      .filter((l) => l !== '')
      .join(',');
    return addressOperator(base, ipList(text));
  },
};
