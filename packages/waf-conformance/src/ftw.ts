/**
 * FTW test files (the YAML format of the OWASP CRS 3.x regression tests, as go-ftw and the Python
 * ftw read them) and the exact request bytes each stage sends.
 *
 * Request building follows go-ftw (ftwhttp/request.go, v0.4-v0.6), which is what CRS runs use:
 * - raw_request / encoded_request (base64) are sent as they are, nothing added;
 * - otherwise "METHOD URI VERSION\r\n", the headers sorted by name as go-ftw writes its header map,
 *   "\r\n", the data. Defaults: GET, "/", "HTTP/1.1" when the key is absent (an explicit "" stays "").
 * - with autocomplete_headers (default true; the older stop_magic: true means false):
 *   a body without "Content-Type" gets application/x-www-form-urlencoded; an urlencoded body that
 *   contains neither "%" nor "+" is re-encoded key by key (Go's url.QueryEscape); "Connection:
 *   close" is added when absent; "Content-Length" is added when there is data or the method matches
 *   go-ftw's /^POST|PUT|PATCH|DELETE$/ (sic).
 * - a multipart/form-data body has its bare LFs turned into CRLF (go-ftw turns every LF; a CR LF
 *   already there is kept, so list-form data is not doubled to CR CR LF).
 * - `data` given as a YAML list is joined with "\r\n", as the Python ftw does (go-ftw takes
 *   strings only); data is sent as UTF-8 and is not run through go-ftw's Go-template expansion.
 * Header names are compared as go-ftw does: byte for byte ("content-type" is not "Content-Type").
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import YAML from 'yaml';

export interface FtwInput {
  dest_addr?: string;
  port?: number;
  protocol?: string;
  method?: string;
  uri?: string;
  version?: string;
  headers?: Record<string, unknown>;
  data?: string | unknown[];
  raw_request?: string;
  encoded_request?: string;
  stop_magic?: boolean;
  autocomplete_headers?: boolean;
  save_cookie?: boolean;
}

export interface FtwOutput {
  status?: number | number[];
  log_contains?: string;
  no_log_contains?: string;
  response_contains?: string;
  expect_error?: boolean;
}

export interface FtwStage {
  readonly input: FtwInput;
  readonly output: FtwOutput;
}

export interface FtwTest {
  readonly title: string;
  readonly description?: string;
  readonly file: string;
  /** False when the file (meta.enabled) or the test says enabled: false. */
  readonly enabled: boolean;
  readonly stages: readonly FtwStage[];
}

function asRecord(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** Tests of one YAML file. Throws with the file name when it is not an FTW file. */
export function parseFtwFile(file: string, text: string = readFileSync(file, 'utf8')): FtwTest[] {
  const doc = asRecord(YAML.parse(text));
  const meta = asRecord(doc.meta);
  const fileEnabled = meta.enabled !== false;
  const tests = doc.tests;
  if (!Array.isArray(tests)) throw new Error(`${file}: no tests[] list`);
  return tests.map((raw, index) => {
    const t = asRecord(raw);
    const stages = Array.isArray(t.stages) ? t.stages : [];
    return {
      title: typeof t.test_title === 'string' ? t.test_title : `${basename(file)}#${index + 1}`,
      ...(typeof t.desc === 'string' ? { description: t.desc } : {}),
      file,
      enabled: fileEnabled && t.enabled !== false,
      stages: stages.map((s) => {
        const stage = asRecord(asRecord(s).stage ?? s);
        return { input: asRecord(stage.input) as FtwInput, output: asRecord(stage.output) as FtwOutput };
      }),
    };
  });
}

/** Every *.yaml / *.yml under `path` (a file or a folder, recursively), sorted by path. */
export function loadFtwTests(path: string): FtwTest[] {
  const files: string[] = [];
  const walk = (p: string): void => {
    if (statSync(p).isDirectory()) {
      for (const name of readdirSync(p).sort()) walk(join(p, name));
    } else if (/\.ya?ml$/.test(p)) {
      files.push(p);
    }
  };
  walk(path);
  return files.flatMap((file) => parseFtwFile(file));
}

/** Go's url.QueryEscape: unreserved bytes stay, space becomes "+", everything else %XX. */
function goQueryEscape(s: string): string {
  let out = '';
  for (const byte of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(byte);
    if (/[A-Za-z0-9\-_.~]/.test(c)) out += c;
    else if (c === ' ') out += '+';
    else out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** go-ftw's encodeDataParameters: only data with nothing to unescape is re-encoded. */
function encodeFormData(data: string): string {
  if (data.includes('%') || data.includes('+')) return data;
  return data
    .split('&')
    .map((token) => {
      const eq = token.indexOf('=');
      return eq < 0 ? goQueryEscape(token) : `${goQueryEscape(token.slice(0, eq))}=${goQueryEscape(token.slice(eq + 1))}`;
    })
    .join('&');
}

function dataString(data: FtwInput['data']): string {
  if (data === undefined || data === null) return '';
  if (Array.isArray(data)) return data.map((line) => (line === null || line === undefined ? '' : String(line))).join('\r\n');
  return String(data);
}

/** autocomplete_headers, with stop_magic as its deprecated inverse; default true. */
export function autocompleteHeaders(input: FtwInput): boolean {
  if (typeof input.autocomplete_headers === 'boolean') return input.autocomplete_headers;
  if (typeof input.stop_magic === 'boolean') return !input.stop_magic;
  return true;
}

/** The exact bytes the stage sends. */
export function buildRequestBytes(input: FtwInput): Buffer {
  if (typeof input.encoded_request === 'string' && input.encoded_request !== '') {
    return Buffer.from(input.encoded_request, 'base64');
  }
  if (typeof input.raw_request === 'string' && input.raw_request !== '') {
    return Buffer.from(input.raw_request, 'utf8');
  }
  const method = input.method === undefined ? 'GET' : String(input.method);
  const uri = input.uri === undefined ? '/' : String(input.uri);
  const version = input.version === undefined ? 'HTTP/1.1' : String(input.version);
  const headers = new Map<string, string>();
  for (const [name, value] of Object.entries(input.headers ?? {})) {
    headers.set(name, value === null || value === undefined ? '' : String(value));
  }
  const get = (name: string): string => headers.get(name) ?? '';
  const add = (name: string, value: string): void => {
    if (get(name) === '') headers.set(name, value);
  };
  const autocomplete = autocompleteHeaders(input);
  let data = dataString(input.data);
  if (data !== '' && autocomplete) {
    add('Content-Type', 'application/x-www-form-urlencoded');
    if (get('Content-Type') === 'application/x-www-form-urlencoded') data = encodeFormData(data);
  }
  if (get('Content-Type').startsWith('multipart/form-data;')) data = data.replace(/(?<!\r)\n/g, '\r\n');
  const body = Buffer.from(data, 'utf8');
  if (autocomplete) {
    add('Connection', 'close');
    if (body.length > 0 || /^POST|PUT|PATCH|DELETE$/.test(method)) add('Content-Length', String(body.length));
  }
  const names = [...headers.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  let head = `${method} ${uri} ${version}\r\n`;
  for (const name of names) head += `${name}: ${headers.get(name) ?? ''}\r\n`;
  head += '\r\n';
  return Buffer.concat([Buffer.from(head, 'utf8'), body]);
}
