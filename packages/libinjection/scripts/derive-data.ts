/**
 * Derives data/sqli-data.json (libinjection's SQLi word and fingerprint table) from a shared
 * library that embeds libinjection: ModSecurity v3's libmodsecurity.so.3 (elf-table.ts). Run once
 * when the table is to be refreshed from another libinjection; the result is checked in.
 *
 *   node packages/libinjection/scripts/derive-data.ts [path/to/libmodsecurity.so.3] [--source TEXT]
 */
import { writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import { parseArgs } from 'node:util';
import { SQLI_DATA_FILE } from '../src/data.ts';
import type { SqliDataFile } from '../src/data.ts';
import { deriveFromLibrary } from './elf-table.ts';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { source: { type: 'string' } } });
const library = positionals[0] ?? '/usr/lib/x86_64-linux-gnu/libmodsecurity.so.3';
const words = deriveFromLibrary(library);
const data: SqliDataFile = { source: values.source ?? `libinjection as embedded in ${basename(library)}`, words };
writeFileSync(SQLI_DATA_FILE, `${JSON.stringify(data)}\n`);
const fingerprints = words.filter(([, type]) => type === 'F').length;
process.stdout.write(`${SQLI_DATA_FILE}: ${words.length} words (${fingerprints} fingerprints) from ${library}\n`);
