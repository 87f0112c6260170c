/**
 * Setup step: derives libinjection's SQLi word/fingerprint table from the installed reference
 * engine (see data.ts) into sqli-data.generated.json (git-ignored).
 *
 *   node src/edge/http/waf/compiled/libinjection/derive-data.ts [path/to/libmodsecurity.so.3]
 */
import { GENERATED_FILE, writeGenerated } from './data.ts';

const data = writeGenerated(process.argv[2]);
const fingerprints = data.words.filter(([, t]) => t === 'F').length;
process.stdout.write(`${GENERATED_FILE}: ${data.words.length} words (${fingerprints} fingerprints) from ${data.source}\n`);
