/**
 * libinjection's SQLi word table (SQL keywords, functions, operators with their token types, and
 * the fingerprints flagged as SQLi, type 'F'): data, shipped in this package as
 * data/sqli-data.json. At run time only that file is read: @detectSQLi works without ModSecurity
 * installed, on any architecture.
 *
 * The file was derived once from the libinjection that ModSecurity v3.0.9 embeds (Debian's
 * libmodsecurity3 3.0.9-1+deb12u2) by scripts/derive-data.ts, and is checked for shape (thousands
 * of entries, sorted, types from libinjection's token alphabet) when loaded. libinjection is
 * BSD-3-Clause, Copyright (c) 2012-2016 Nick Galbreath: see LICENSE.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The shipped table. */
export const SQLI_DATA_FILE = fileURLToPath(new URL('../data/sqli-data.json', import.meta.url));

export interface SqliData {
  /** Upper-case word -> token type ('k', 'f', 'o', '&', 'U', 'E', 'B', 't', 'T', 'A', 'n', 'v', '1', 'c', 'F' ...). */
  readonly words: ReadonlyMap<string, string>;
  /** Where the table came from, for reports. */
  readonly source: string;
}

/** The data file's content. */
export interface SqliDataFile {
  readonly source: string;
  readonly words: [string, string][];
}

const TYPES = new Set([
  'k',
  'U',
  'B',
  'E',
  't',
  'f',
  'n',
  '1',
  'v',
  's',
  'o',
  '&',
  'c',
  'A',
  '(',
  ')',
  '{',
  '}',
  '.',
  ',',
  ':',
  ';',
  'T',
  '?',
  'X',
  'F',
  '\\',
]);

/** Throws unless `table` looks like libinjection's word table (`where` names it in the message). */
export function checkTable(table: [string, string][], where: string): void {
  if (table.length < 5000) throw new Error(`${where}: no libinjection keyword table found (largest candidate has ${table.length} entries)`);
  let fingerprints = 0;
  for (let i = 0; i < table.length; i++) {
    const [word, type] = table[i]!;
    if (!TYPES.has(type)) throw new Error(`${where}: unexpected token type ${JSON.stringify(type)} for ${JSON.stringify(word)}`);
    if (word !== word.toUpperCase()) throw new Error(`${where}: keyword ${JSON.stringify(word)} is not upper case`);
    if (i > 0 && table[i - 1]![0] >= word) throw new Error(`${where}: keyword table is not sorted at ${JSON.stringify(word)}`);
    if (type === 'F') {
      fingerprints++;
      if (!/^0.{1,5}$/.test(word)) throw new Error(`${where}: bad fingerprint entry ${JSON.stringify(word)}`);
    }
  }
  if (fingerprints < 1000) throw new Error(`${where}: only ${fingerprints} fingerprints in the keyword table`);
}

let cached: SqliData | undefined;

/** The table, read from the shipped file on first use. */
export function loadSqliData(): SqliData {
  if (cached) return cached;
  const data = JSON.parse(readFileSync(SQLI_DATA_FILE, 'utf8')) as SqliDataFile;
  checkTable(data.words, SQLI_DATA_FILE);
  cached = { words: new Map(data.words), source: data.source };
  return cached;
}
