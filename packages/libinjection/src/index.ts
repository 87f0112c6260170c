/**
 * libinjection's SQLi and XSS detection (ModSecurity's @detectSQLi and @detectXSS), ported to
 * TypeScript; its SQLi word table ships as data (data.ts).
 */
export { detectSqli, sqliFingerprint, SQLI_FLAGS } from './sqli.ts';
export { detectXss, tokenizesAsXss } from './xss.ts';
export { loadSqliData, SQLI_DATA_FILE } from './data.ts';
export type { SqliData } from './data.ts';
