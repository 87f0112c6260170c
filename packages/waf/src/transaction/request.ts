/**
 * Feeding a request into a Transaction the way ModSecurity v3.0.9's Transaction does
 * (processConnection, processURI, addRequestHeader, appendRequestBody, processRequestBody):
 * which variables exist, how they are named and decoded, and when each body processor runs.
 */
import { extractArguments } from '../body/urlencoded.ts';
import { parseJsonBody } from '../body/json.ts';
import { parseMultipart } from '../body/multipart.ts';
import { parseXml } from '../body/xml.ts';
import { lowerAscii } from '../ascii.ts';
import type { Transaction } from './rule-loop.ts';
import { newBox } from './value-cache.ts';

const HEX = (c: number): number => {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  return -1;
};

/** utils::uri_decode: %XX only (no '+'). */
export function uriDecode(s: string): string {
  if (s.indexOf('%') < 0) return s;
  let out = '';
  const n = s.length;
  let i = 0;
  while (i < n) {
    if (s.charCodeAt(i) === 0x25 && i + 2 < n) {
      const a = HEX(s.charCodeAt(i + 1));
      const b = HEX(s.charCodeAt(i + 2));
      if (a >= 0 && b >= 0) {
        out += String.fromCharCode((a << 4) + b);
        i += 3;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

export function processConnection(tx: Transaction, clientIp: string, clientPort: number, serverIp: string, serverPort: number): void {
  tx.setSingle('REMOTE_HOST', clientIp);
  // (UNIQUE_ID: made when first read, Transaction.id)
  tx.setSingle('REMOTE_ADDR', clientIp);
  tx.setSingle('SERVER_ADDR', serverIp);
  tx.setSingle('SERVER_PORT', String(serverPort));
  tx.setSingle('REMOTE_PORT', String(clientPort));
  tx.evaluatePhase(0);
}

/** ModSecurity takes the URI, method and version as C strings: each ends at its first NUL byte. */
function cString(s: string): string {
  const nul = s.indexOf('\0');
  return nul < 0 ? s : s.slice(0, nul);
}

export function processUri(tx: Transaction, rawUri: string, rawMethod: string, rawVersion: string): void {
  const uri = cString(rawUri);
  const method = cString(rawMethod);
  const httpVersion = cString(rawVersion);
  const hash = uri.indexOf('#');
  const uriS = hash >= 0 ? uri.slice(0, hash) : uri;
  const posRawQuery = uriS.indexOf('?');
  const decoded = uriDecode(uriS);
  tx.setSingle('REQUEST_METHOD', method);
  tx.setSingle('REQUEST_LINE', `${method} ${uri} HTTP/${httpVersion}`);
  tx.setSingle('REQUEST_PROTOCOL', `HTTP/${httpVersion}`);
  const posQuery = decoded.indexOf('?');
  if (posRawQuery >= 0) tx.setSingle('QUERY_STRING', uriS.slice(posRawQuery + 1));
  const pathInfo = posQuery < 0 ? decoded : decoded.slice(0, posQuery);
  tx.setSingle('PATH_INFO', pathInfo);
  tx.setSingle('REQUEST_FILENAME', pathInfo);
  const slash = Math.max(pathInfo.lastIndexOf('/'), pathInfo.lastIndexOf('\\'));
  if (slash >= 0 && pathInfo.length > slash + 1) tx.setSingle('REQUEST_BASENAME', pathInfo.slice(slash + 1));
  let parsedUri = decoded;
  if (decoded !== '' && decoded[0] !== '/') {
    const colon = decoded.indexOf(':');
    const scheme = colon < 0 ? 0 : colon + 1;
    const found = decoded.indexOf('//', scheme);
    const netloc = found < 0 ? 1 : found + 2;
    if (netloc === scheme + 2) {
      const path = decoded.indexOf('/', netloc);
      if (path >= 0) parsedUri = decoded.slice(path);
    }
  }
  tx.setSingle('REQUEST_URI', parsedUri);
  tx.setSingle('REQUEST_URI_RAW', uri);
  const qs = tx.getSingle('QUERY_STRING');
  if (qs !== '') {
    if (extractArguments(tx, 'GET', qs, tx.rs.config.argumentSeparator)) tx.setSingle('URLENCODED_ERROR', '1');
  }
}

const TRAILING_SPACE = /[\t-\r ]+$/;
const LEADING_SPACE = /^[\t-\r ]+/;

/** Transaction::addRequestHeader. */
export function addRequestHeader(tx: Transaction, key: string, value: string): void {
  tx.requestHeadersNames.push({ key, full: `REQUEST_HEADERS_NAMES:${key}`, box: newBox(key), uk: undefined });
  tx.requestHeaders.push({ key, full: `REQUEST_HEADERS:${key}`, box: newBox(value), uk: undefined });
  const keyl = lowerAscii(key);
  if (keyl === 'authorization') {
    const sp = value.indexOf(' ');
    tx.setSingle('AUTH_TYPE', sp < 0 ? value : value.slice(0, sp));
  }
  if (keyl === 'cookie') {
    const cookies = value === '' ? [] : value.split(';');
    if (cookies.length > 0 && cookies[cookies.length - 1] === '') cookies.pop();
    if (cookies.length > 0) cookies[cookies.length - 1] = cookies[cookies.length - 1]!.replace(TRAILING_SPACE, '');
    for (const c of cookies) {
      if (c === '') continue;
      const eq = c.indexOf('=');
      let ckey = eq < 0 ? c : c.slice(0, eq);
      const cval = eq < 0 ? '' : c.slice(eq + 1);
      ckey = ckey.replace(LEADING_SPACE, '');
      if (ckey === '') continue;
      tx.requestCookiesNames.push({ key: ckey, full: `REQUEST_COOKIES_NAMES:${ckey}`, box: newBox(ckey), uk: undefined });
      tx.requestCookies.push({ key: ckey, full: `REQUEST_COOKIES:${ckey}`, box: newBox(cval), uk: undefined });
    }
  }
  if (keyl === 'content-type') {
    const l = lowerAscii(value);
    if (l.startsWith('multipart/form-data')) {
      tx.requestBodyType = 'MULTIPART';
      tx.setSingle('REQBODY_PROCESSOR', 'MULTIPART');
    }
    if (l.startsWith('application/x-www-form-urlencoded')) {
      tx.requestBodyType = 'URLENCODED';
      tx.setSingle('REQBODY_PROCESSOR', 'URLENCODED');
    }
  }
  if (keyl === 'host') {
    const colon = value.indexOf(':');
    tx.setSingle('SERVER_NAME', colon < 0 ? value : value.slice(0, colon));
  }
}

export function processRequestHeaders(tx: Transaction): void {
  if (tx.engineState() === 'Off') return;
  tx.evaluatePhase(1);
}

/** Request body as a binary string; `truncated` when it went past the limit (INBOUND_DATA_ERROR). */
export interface BodyInput {
  readonly body: string;
  readonly overLimit: boolean;
}

/** appendRequestBody with the limit policy; returns the part kept. */
export function appendRequestBody(tx: Transaction, body: Uint8Array): BodyInput {
  const limit = tx.rs.config.requestBodyLimit;
  let bytes = body;
  let overLimit = false;
  if (limit > 0 && body.length > limit) {
    overLimit = true;
    tx.setSingle('INBOUND_DATA_ERROR', '1');
    if (tx.rs.config.requestBodyLimitAction === 'ProcessPartial') bytes = body.subarray(0, limit);
    else {
      // Reject: ModSecurity keeps nothing of this chunk and asks to interrupt (engine On)
      bytes = new Uint8Array(0);
      if (tx.engineState() === 'On') {
        tx.intervention.status = 403;
        tx.intervention.disruptive = true;
      }
    }
  }
  return { body: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1'), overLimit };
}

export function processRequestBody(tx: Transaction, body: string): void {
  if (tx.engineState() === 'Off') return;
  if (tx.getSingle('INBOUND_DATA_ERROR') === '') tx.setSingle('INBOUND_DATA_ERROR', '0');
  const config = tx.rs.config;
  let noFilesExceeded = false;
  const setError = (msg: string, processor = true): void => {
    tx.setSingle('REQBODY_ERROR', '1');
    tx.setSingle('REQBODY_ERROR_MSG', msg);
    if (processor) {
      tx.setSingle('REQBODY_PROCESSOR_ERROR', '1');
      tx.setSingle('REQBODY_PROCESSOR_ERROR_MSG', msg);
    }
  };
  const setOk = (): void => {
    tx.setSingle('REQBODY_ERROR', '0');
    tx.setSingle('REQBODY_PROCESSOR_ERROR', '0');
  };
  if (tx.requestBodyType === 'URLENCODED' || tx.requestBodyProcessor === 'JSON' || tx.requestBodyProcessor === 'XML') {
    if (config.requestBodyNoFilesLimit !== undefined && body.length > config.requestBodyNoFilesLimit) {
      tx.setSingle('REQBODY_ERROR', '1');
      tx.setSingle('REQBODY_ERROR_MSG', 'Request body excluding files is bigger than the maximum expected.');
      tx.setSingle('INBOUND_DATA_ERROR', '1');
      noFilesExceeded = true;
    }
  }
  if (tx.requestBodyProcessor === 'XML') {
    if (!noFilesExceeded) {
      const r = parseXml(body, tx.inputLimits.xmlDepth);
      tx.xmlDocument = r.document;
      if (r.limited) {
        tx.exceedInputLimit('xmlDepth');
        setOk();
      } else if (r.error !== undefined) setError(`XML parsing error: ${r.error}`);
      else setOk();
    }
  } else if (tx.requestBodyProcessor === 'JSON') {
    if (!noFilesExceeded) {
      const r = parseJsonBody(body, tx, config.requestBodyJsonDepthLimit);
      // (a parse stopped at an input limit is no error of the body: the limit's rule reports it)
      if (r.error !== undefined && body.length > 0 && !r.limited) setError(`JSON parsing error: ${r.error}`);
      else setOk();
    }
  } else if (tx.requestBodyType === 'MULTIPART') {
    const contentType = firstHeader(tx, 'content-type');
    let error: string | undefined;
    let noFilesLength = 0;
    if (contentType !== undefined) {
      const r = parseMultipart(tx, contentType, body);
      error = r.error;
      noFilesLength = r.noFilesLength;
    }
    if (error !== undefined) setError(`Multipart parsing error: ${error}`);
    else if (config.requestBodyNoFilesLimit !== undefined && noFilesLength > config.requestBodyNoFilesLimit) {
      tx.setSingle('REQBODY_ERROR', '1');
      tx.setSingle('REQBODY_ERROR_MSG', 'Request body excluding files is bigger than the maximum expected.');
      tx.setSingle('INBOUND_DATA_ERROR', '1');
    } else setOk();
  } else if (tx.requestBodyType === 'URLENCODED') {
    if (!noFilesExceeded) {
      if (extractArguments(tx, 'POST', body, config.argumentSeparator)) tx.setSingle('URLENCODED_ERROR', '1');
    }
  } else {
    setOk();
  }
  const access = tx.requestBodyAccess ?? config.requestBodyAccess;
  if (!access) return;
  if (tx.rs.readsFullRequest) {
    let full = '';
    for (const h of tx.requestHeaders) full += `${h.key}: ${h.box.v}\n`;
    full += `\n\n${body}`;
    tx.setSingle('FULL_REQUEST', full);
    tx.setSingle('FULL_REQUEST_LENGTH', String(full.length));
  }
  if (body.length > 0) {
    tx.setSingle('REQUEST_BODY', body);
    tx.setSingle('REQUEST_BODY_LENGTH', String(body.length));
  }
  tx.evaluatePhase(2);
}

/** First value of a request header (ModSecurity's resolveFirst, case-insensitive name). */
export function firstHeader(tx: Transaction, lowerName: string): string | undefined {
  for (const h of tx.requestHeaders) if (lowerAscii(h.key) === lowerName) return h.box.v;
  return undefined;
}

export function processLogging(tx: Transaction): void {
  if (tx.engineState() !== 'Off') tx.evaluatePhase(5);
  tx.finish();
}
