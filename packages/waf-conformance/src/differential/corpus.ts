/**
 * Request corpora for the differential test (compiled engine versus the ModSecurity addon):
 * 1. every stage of every CRS 3.3.4 regression case (FTW YAML), parsed from the exact bytes the
 *    conformance runner sends;
 * 2. a deterministic generated corpus: benign traffic shapes (browser GETs, form posts, JSON APIs,
 *    multipart uploads, XML/SOAP, cookies) and attack payloads taken from the CRS tests, placed in
 *    every kind of request field and mutated (encodings, case, comments, truncation, splicing),
 *    each with per-proxy settings drawn at random (paranoia 1-4, mode, threshold, exclusions).
 */
import { existsSync } from 'node:fs';
import type { WafEngineSettings, WafRequest } from '@tps/waf';
import { Random } from '../random.ts';
import { buildRequestBytes, loadFtwTests } from '../ftw.ts';
import { parseRawRequest } from '../raw-http.ts';

export interface CorpusCase {
  readonly name: string;
  readonly request: WafRequest;
  readonly settings: WafEngineSettings;
}

/** The CRS regression stages of the suite in `folder` as requests (those the raw parser accepts). */
export function crsRegressionCases(folder: string, settings: WafEngineSettings = { paranoiaLevel: 4, mode: 'LOGGING' }): CorpusCase[] {
  if (!existsSync(folder)) return [];
  const out: CorpusCase[] = [];
  for (const test of loadFtwTests(folder)) {
    test.stages.forEach((stage, k) => {
      const parsed = parseRawRequest(buildRequestBytes(stage.input));
      if (parsed.kind !== 'request') return;
      out.push({
        name: `${test.title}#${k + 1}`,
        request: {
          clientIp: '127.0.0.1',
          clientPort: 40000 + out.length,
          serverIp: '127.0.0.1',
          serverPort: Number(stage.input.port ?? 80) || 80,
          method: parsed.method,
          uri: parsed.uri,
          httpVersion: parsed.httpVersion,
          headers: parsed.headers,
          ...(parsed.body.length > 0 ? { body: parsed.body } : {}),
        },
        settings,
      });
    });
  }
  return out;
}

/** Attack payloads of the CRS tests in `folder` (query values, bodies, header values), decoded once. */
export function crsPayloads(folder: string): string[] {
  const set = new Set<string>();
  if (!existsSync(folder)) return [];
  const add = (raw: string): void => {
    for (const part of raw.split(/[&?]/)) {
      const eq = part.indexOf('=');
      const v = eq >= 0 ? part.slice(eq + 1) : part;
      if (v.length < 3 || v.length > 600) continue;
      try {
        set.add(decodeURIComponent(v.replace(/\+/g, ' ')));
      } catch {
        set.add(v);
      }
    }
  };
  for (const test of loadFtwTests(folder)) {
    for (const stage of test.stages) {
      const input = stage.input;
      if (typeof input.uri === 'string') add(input.uri);
      if (typeof input.data === 'string') add(input.data);
      for (const [name, v] of Object.entries(input.headers ?? {})) {
        if (typeof v === 'string' && !/^(host|content-length|content-type|connection|accept)$/i.test(name) && v.length >= 3) set.add(v);
      }
    }
  }
  return [...set].sort();
}

const USER_AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15',
  'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148',
  'curl/8.5.0',
  'python-requests/2.32.3',
  'okhttp/4.12.0',
  'Go-http-client/1.1',
];
const PATHS = [
  '/',
  '/index.html',
  '/products',
  '/api/v1/items',
  '/search',
  '/login',
  '/account/settings',
  '/static/app.js',
  '/images/logo.png',
  '/blog/2024/06/hello-world',
  '/cart/checkout',
  '/wp-admin/admin-ajax.php',
  '/graphql',
  '/v2/users/123/orders',
];
const WORDS = [
  'alpha',
  'beta',
  'shoes',
  'red',
  'size',
  'page',
  'sort',
  'desc',
  'query',
  'hello world',
  'café',
  'Zürich',
  '東京',
  "o'reilly",
  'a+b',
  '50%',
  'x@y.com',
  '2024-06-01',
  '12345',
  'true',
  'null',
  'John Smith',
  'new york',
  '+49 30 123456',
];
const PARAM_NAMES = [
  'q',
  'id',
  'page',
  'sort',
  'lang',
  'user',
  'name',
  'email',
  'search',
  'category',
  'redirect',
  'file',
  'token',
  'filter[status]',
  'items[]',
  'ref',
  'utm_source',
  'callback',
];
const ACCEPTS = ['text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8', 'application/json', '*/*', 'image/avif,image/webp,*/*'];
const MUTATORS: ((s: string, r: Random) => string)[] = [
  (s) => s,
  (s) => encodeURIComponent(s),
  (s) => s.toUpperCase(),
  (s, r) => s.replace(/ /g, r.pick(['/**/', '%20', '+', '\t', '%09', '  '])),
  (s, r) => s.slice(0, Math.max(1, r.int(s.length + 1))),
  (s, r) => `${r.pick(WORDS)} ${s}`,
  (s, r) => s + r.pick(["'", '"', ';', '--', '#', ' or 1=1', '<', '>', '%00', '\\']),
  (s) => s.replace(/[aeiou]/g, (c) => `%${c.charCodeAt(0).toString(16)}`),
  (s) => encodeURIComponent(encodeURIComponent(s)),
  (s, r) => {
    const k = r.int(s.length + 1);
    return s.slice(0, k) + r.pick(['%u0027', '&#39;', '\\x27', '&lt;', '/*!50000', ' ']) + s.slice(k);
  },
];

function q(s: string): string {
  // what a client would put in a query string: percent-encode what is not allowed raw
  return encodeURIComponent(s).replace(/%20/g, '+');
}

function baseHeaders(r: Random, host: string): [string, string][] {
  const h: [string, string][] = [
    ['Host', host],
    ['User-Agent', r.pick(USER_AGENTS)],
    ['Accept', r.pick(ACCEPTS)],
  ];
  if (r.chance(0.7)) h.push(['Accept-Language', r.pick(['en-US,en;q=0.9', 'de-DE,de;q=0.8,en;q=0.5', 'fr'])]);
  if (r.chance(0.7)) h.push(['Accept-Encoding', 'gzip, deflate, br']);
  if (r.chance(0.5)) h.push(['Cookie', `session=${r.int(1e9).toString(36)}; theme=${r.pick(['dark', 'light'])}; _ga=GA1.2.${r.int(1e9)}`]);
  if (r.chance(0.4)) h.push(['Referer', `https://${host}${r.pick(PATHS)}`]);
  if (r.chance(0.3)) h.push(['X-Requested-With', 'XMLHttpRequest']);
  if (r.chance(0.5)) h.push(['Connection', 'keep-alive']);
  return h;
}

function settingsFor(r: Random): WafEngineSettings {
  const paranoiaLevel = 1 + r.int(4);
  const s: {
    paranoiaLevel: number;
    mode: 'BLOCKING' | 'LOGGING';
    anomalyThreshold?: number;
    ruleExclusions?: WafEngineSettings['ruleExclusions'];
  } = {
    paranoiaLevel,
    mode: r.chance(0.5) ? 'BLOCKING' : 'LOGGING',
  };
  if (r.chance(0.15)) s.anomalyThreshold = r.pick([3, 5, 10, 20, 50]);
  if (r.chance(0.1)) {
    s.ruleExclusions = [
      r.chance(0.5)
        ? { ruleIds: [r.pick([942100, 941100, 920273, 932100, 930100, 942432])] }
        : { ruleIds: [r.pick([942100, 941100, 920273, 942432, 942431])], target: `ARGS:${r.pick(PARAM_NAMES)}` },
    ];
  }
  return s;
}

type Place =
  | 'query'
  | 'queryName'
  | 'path'
  | 'cookie'
  | 'header'
  | 'form'
  | 'json'
  | 'jsonKey'
  | 'multipart'
  | 'multipartFile'
  | 'xml'
  | 'xmlAttr';
const PLACES: Place[] = [
  'query',
  'query',
  'query',
  'queryName',
  'path',
  'cookie',
  'header',
  'form',
  'form',
  'json',
  'jsonKey',
  'multipart',
  'multipartFile',
  'xml',
  'xmlAttr',
];

function xmlEscape(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** One generated request: benign, or with `payload` placed somewhere. */
export function generateRequest(r: Random, index: number, payload?: string): CorpusCase {
  const host = r.pick(['example.com', 'shop.example.org', 'api.example.net', '10.0.0.5:8080']);
  const headers = baseHeaders(r, host);
  let method = 'GET';
  let path = r.pick(PATHS);
  const params: [string, string][] = [];
  const nparams = r.int(6);
  for (let k = 0; k < nparams; k++) params.push([r.pick(PARAM_NAMES), r.chance(0.5) ? r.pick(WORDS) : String(r.int(100000))]);
  let body: string | undefined;
  let bodyKind = r.pick(['none', 'none', 'none', 'form', 'json', 'multipart', 'xml'] as const);
  let place: Place | undefined;
  let value = payload;
  if (payload !== undefined) {
    value = r.pick(MUTATORS)(payload, r);
    place = r.pick(PLACES);
    if (place === 'form') bodyKind = 'form';
    else if (place === 'json' || place === 'jsonKey') bodyKind = 'json';
    else if (place === 'multipart' || place === 'multipartFile') bodyKind = 'multipart';
    else if (place === 'xml' || place === 'xmlAttr') bodyKind = 'xml';
  }
  const fields: [string, string][] = [];
  for (let k = 0; k < 1 + r.int(5); k++) fields.push([r.pick(PARAM_NAMES), r.pick(WORDS)]);
  if (place === 'query') params.push([r.pick(PARAM_NAMES), value!]);
  if (place === 'queryName') params.push([value!, '1']);
  if (place === 'path') path = path.replace(/\/?$/, '/') + value!.replace(/[?#]/g, '');
  if (place === 'cookie') headers.push(['Cookie', `${r.pick(['pref', 'sid', 'cart'])}=${value}`]);
  if (place === 'header')
    headers.push([
      r.pick(['User-Agent', 'Referer', 'X-Forwarded-For', 'X-Api-Version', 'Accept-Language']),
      value!.replace(/[\r\n]/g, ' '),
    ]);
  if (place === 'form' || place === 'multipart') fields.push([r.pick(PARAM_NAMES), value!]);
  let uri = path;
  if (params.length > 0)
    uri +=
      '?' +
      params
        .map(
          ([k, v]) =>
            `${q(k)}=${place === 'query' && v === value && r.chance(0.3) ? v.replace(/[ #&]/g, (c) => encodeURIComponent(c)) : q(v)}`,
        )
        .join('&');
  switch (bodyKind) {
    case 'form':
      method = 'POST';
      body = fields.map(([k, v]) => `${q(k)}=${q(v)}`).join('&');
      headers.push(['Content-Type', 'application/x-www-form-urlencoded']);
      break;
    case 'json': {
      method = r.pick(['POST', 'PUT', 'PATCH']);
      const obj: Record<string, unknown> = {
        id: r.int(1000),
        name: r.pick(WORDS),
        tags: [r.pick(WORDS), r.pick(WORDS)],
        nested: { enabled: r.chance(0.5), count: r.int(50) },
      };
      if (place === 'json') (obj.nested as Record<string, unknown>)[r.pick(PARAM_NAMES)] = value;
      if (place === 'jsonKey') obj[value!] = 1;
      body = JSON.stringify(r.chance(0.2) ? [obj, obj] : obj);
      headers.push(['Content-Type', r.pick(['application/json', 'application/json; charset=utf-8'])]);
      break;
    }
    case 'multipart': {
      method = 'POST';
      const boundary = `----WebKitFormBoundary${r.int(1e9).toString(36)}`;
      let b = '';
      for (const [k, v] of fields) b += `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`;
      const fname = place === 'multipartFile' ? value!.replace(/["\r\n]/g, '') : r.pick(['photo.jpg', 'report.pdf', 'notes.txt']);
      b += `--${boundary}\r\nContent-Disposition: form-data; name="upload"; filename="${fname}"\r\nContent-Type: ${r.pick(['image/jpeg', 'application/pdf', 'text/plain'])}\r\n\r\n${'x'.repeat(r.int(300))}\r\n`;
      b += `--${boundary}--\r\n`;
      body = b;
      headers.push(['Content-Type', `multipart/form-data; boundary=${boundary}`]);
      break;
    }
    case 'xml': {
      method = 'POST';
      const text = place === 'xml' ? xmlEscape(value!) : xmlEscape(r.pick(WORDS));
      const attr = place === 'xmlAttr' ? xmlEscape(value!) : 'x1';
      body = `<?xml version="1.0" encoding="UTF-8"?>\n<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><getItem id="${attr}"><name>${text}</name><qty>${r.int(10)}</qty></getItem></soap:Body></soap:Envelope>`;
      headers.push(['Content-Type', r.pick(['text/xml', 'application/xml', 'application/soap+xml'])]);
      break;
    }
    default:
      if (r.chance(0.05)) method = r.pick(['HEAD', 'OPTIONS', 'DELETE']);
  }
  const bodyBuf = body !== undefined ? Buffer.from(body, 'utf8') : undefined;
  if (bodyBuf) headers.push(['Content-Length', String(bodyBuf.length)]);
  // the engine takes binary strings: UTF-8 bytes, one char per byte
  const bin = (s: string): string => Buffer.from(s, 'utf8').toString('latin1');
  return {
    name: `gen-${index}${payload !== undefined ? `-${place}` : '-benign'}`,
    request: {
      clientIp: `192.0.2.${1 + r.int(250)}`,
      clientPort: 1024 + r.int(60000),
      serverIp: '198.51.100.10',
      serverPort: 80,
      method,
      uri: bin(uri),
      httpVersion: r.chance(0.9) ? '1.1' : '1.0',
      headers: headers.map(([k, v]) => [k, bin(v)] as const),
      ...(bodyBuf ? { body: bodyBuf } : {}),
    },
    settings: settingsFor(r),
  };
}

/** `count` generated requests: about a third benign, the rest with payloads of the CRS tests in `folder`. */
export function generatedCases(folder: string, count: number, seed = 20240601): CorpusCase[] {
  const r = new Random(seed);
  const payloads = crsPayloads(folder);
  const out: CorpusCase[] = [];
  for (let i = 0; i < count; i++) {
    const attack = payloads.length > 0 && !r.chance(0.35);
    out.push(generateRequest(r, i, attack ? r.pick(payloads) : undefined));
  }
  return out;
}
