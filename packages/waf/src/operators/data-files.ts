/** Data files of operators (@pmFromFile, @ipMatchFromFile): a relative name resolves next to the rule's file. */
import { dirname, isAbsolute, join } from 'node:path';

export function resolveDataFile(param: string, ruleFile: string): string {
  const name = param.trim();
  if (isAbsolute(name)) return name;
  return join(dirname(ruleFile), name);
}
