/**
 * The inputs of @tps/waf's (and @tps/libinjection's) golden test vectors: what generate.ts runs
 * through ModSecurity to write the expected results, and what the live oracle tests (../oracle/)
 * run through both engines. One list, so that the vectors and the live comparison cover the same
 * cases.
 */
import { TRANSFORMATIONS } from '@tps/waf';
import type { WafEngineSettings, WafRequest } from '@tps/waf';
import { loadSqliData } from '@tps/libinjection';
import { Random } from '../random.ts';
import { crsPayloads } from '../differential/corpus.ts';

/** A request with everything but what a case sets. */
export function simpleRequest(partial: Partial<WafRequest> = {}): WafRequest {
  return {
    clientIp: '127.0.0.1',
    clientPort: 40000,
    serverIp: '127.0.0.1',
    serverPort: 80,
    method: 'GET',
    uri: '/',
    httpVersion: '1.1',
    headers: [['Host', 'localhost']],
    ...partial,
  };
}

// ------------------------------------------------------------------------------ transformations

export const TRANSFORMATION_INPUTS: readonly string[] = [
  'plain text',
  'A%41%4%zz+%u0041%U00E9%uFF21%',
  '&lt;script&gt;&#x3c;&#60&amp;amp;&nbsp;&#xffffffffffff;&quot',
  '\\x3c\\u003c\\74\\8\\u12\\',
  '\\3c \\000041\\ff01\\\n\\g\\',
  '/a/b/../../../etc/./passwd//x/',
  '..\\..\\windows\\win.ini',
  'C:\\\\Program" Files\\x ; ping ,  127.0.0.1 /n ^1',
  'select/*comment*/1 -- rest',
  '<!-- a -->b#c--d',
  'caf\xc3\xa9 \xe2\x80\x99 \xf0\x9f\x98\x80 \xc3 \xc0\xaf \xed\xa0\x80 \xff\xfe',
  'a\x00b\x00',
  '  \t\x0b lots   of\r\n\r\n space \xa0\xc2  ',
  'VGhpcyBpcyBiYXNlNjQ=',
  'VGhp cyBp',
  'AbC DeF',
];

/** Transformations compared with ModSecurity through its logdata (the others are checked against node:crypto and Buffer, or have no oracle form). */
export function comparableTransformations(): string[] {
  const without = [
    'sha1',
    'md5',
    'parityeven7bit',
    'parityodd7bit',
    'parityzero7bit',
    'hexdecode',
    'sqlhexdecode',
    'escapeseqdecode',
    'removecommentschar',
    'base64encode',
    'urlencode',
    'uppercase',
    'trim',
    'trimleft',
    'trimright',
  ];
  return [...TRANSFORMATIONS.keys()].filter((name) => !without.includes(name));
}

/** One rule per transformation, logging `name=value` of every value it changed (multiMatch: the last one logged is the fully transformed value). */
export function transformationRules(names: readonly string[]): string {
  return names
    .map(
      (n, k) =>
        `SecRule REQUEST_HEADERS "@unconditionalMatch" "id:${1000 + k},phase:1,pass,log,t:none,t:${n},msg:'${n}',logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}',multiMatch"`,
    )
    .join('\n');
}

/** The request carrying TRANSFORMATION_INPUTS, header hK holding input K. */
export function transformationRequest(): WafRequest {
  return simpleRequest({ headers: TRANSFORMATION_INPUTS.map((v, k) => [`h${k}`, v] as const) });
}

// ------------------------------------------------------------------------------ operators

/** A small rule set, a request, and what ModSecurity logs for it (sorted "id data" lines). */
export interface RuleCase {
  readonly name: string;
  readonly rules: string;
  readonly request: WafRequest;
  /** Only the matches of this rule id count (body processors: the rule that logs every variable). */
  readonly onlyRule?: number | undefined;
  /** Compare `data` only, not `id data`. */
  readonly dataOnly?: boolean | undefined;
}

const OPERATORS = [
  '@pm select union',
  '@within GET POST HEAD',
  '@contains admin',
  '@containsWord admin',
  '@streq GET',
  '@beginsWith /adm',
  '@endsWith .php',
  '@eq 5',
  '@gt 5',
  '@ge 5',
  '@lt 5',
  '@le 5',
  '@ipMatch 10.0.0.0/8,192.168.1.1,2001:db8::/32',
  '@validateByteRange 32-126',
  '@validateUrlEncoding',
  '@validateUtf8Encoding',
  '@rx (?i)^[a-z]{3}\\d',
  '@unconditionalMatch',
];
const OPERATOR_VALUES = [
  'GET',
  'get',
  'POST',
  'admin',
  'the admin page',
  'xadminx',
  '/admin/x',
  'index.php',
  '5',
  '05',
  ' 6',
  '-1',
  '4x',
  '10.1.2.3',
  '192.168.1.1',
  '2001:db8::1',
  '8.8.8.8',
  'tab\there',
  '%41%zz',
  '\xc3\xa9',
  '\xc3',
  'abc1',
  'ABC9',
  '',
  'select * from',
];

export function operatorCases(): RuleCase[] {
  return [
    {
      name: 'operators on header values',
      rules: OPERATORS.map(
        (op, k) =>
          `SecRule REQUEST_HEADERS "${op}" "id:${100 + k},phase:1,pass,log,multiMatch,t:none,msg:'${k}',logdata:'%{MATCHED_VAR_NAME}'"`,
      ).join('\n'),
      request: simpleRequest({ headers: OPERATOR_VALUES.map((v, k) => [`h${k}`, v] as const) }),
    },
    {
      // under PCRE_DOTALL `^.*$` matches (and captures) every value whole, newlines included
      name: '@rx ^.*$ captures every value whole',
      rules: `SecRule ARGS "@rx ^.*$" "id:100,phase:1,pass,log,capture,multiMatch,t:none,logdata:'%{TX.0}'"`,
      request: simpleRequest({ uri: '/?a=&b=plain&c=line%0Anext&d=crlf%0D%0A&e=%00%FF' }),
    },
  ];
}

// ------------------------------------------------------------------------------ body processors

const BODY_RULES = [
  `SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=JSON"`,
  `SecRule REQUEST_HEADERS:Content-Type "^text/xml" "id:2,phase:1,pass,nolog,ctl:requestBodyProcessor=XML"`,
  `SecRule ARGS|ARGS_NAMES|FILES|FILES_NAMES|FILES_SIZES|MULTIPART_NAME|MULTIPART_FILENAME|MULTIPART_PART_HEADERS|XML:/*|XML://@*|REQBODY_ERROR|REQBODY_PROCESSOR|MULTIPART_STRICT_ERROR|MULTIPART_UNMATCHED_BOUNDARY|MULTIPART_LF_LINE|MULTIPART_DATA_AFTER|MULTIPART_INVALID_QUOTING|MULTIPART_MISSING_SEMICOLON|MULTIPART_HEADER_FOLDING|MULTIPART_INVALID_PART|FILES_COMBINED_SIZE|URLENCODED_ERROR "@unconditionalMatch" "id:3,phase:2,pass,log,multiMatch,t:none,msg:'v',logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"`,
].join('\n');

export function bodyCases(): RuleCase[] {
  const mp = (b: string): [string, string][] => [
    ['Content-Type', `multipart/form-data; boundary=${b}`],
    ['Content-Length', '0'],
  ];
  const bodies: [string, [string, string][], string][] = [
    ['json', [['Content-Type', 'application/json']], '{"user":{"name":"x","roles":["a","b"]},"n":1.5e3,"ok":false,"z":null}'],
    ['json error', [['Content-Type', 'application/json']], '{"a":"b",}'],
    ['xml', [['Content-Type', 'text/xml']], '<?xml version="1.0"?><r a="1"><b>text</b><c d="e">more</c></r>'],
    ['xml error', [['Content-Type', 'text/xml']], '<r><b>text</r>'],
    ['urlencoded', [['Content-Type', 'application/x-www-form-urlencoded']], 'a=1&b=%41%zz&&c&=d&e=f+g'],
    [
      'multipart',
      mp('XyZ'),
      '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nline1\r\nline2\r\n--XyZ\r\nContent-Disposition: form-data; name="up"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nfile\r\ncontent\r\n--XyZ--\r\n',
    ],
    ['multipart lf', mp('XyZ'), '--XyZ\nContent-Disposition: form-data; name="f1"\n\nv\n--XyZ--\n'],
    ['multipart quoting', mp('XyZ'), "--XyZ\r\nContent-Disposition: form-data; name='f1'\r\n\r\nv\r\n--XyZ--\r\n"],
    ['multipart folding', mp('XyZ'), '--XyZ\r\nContent-Disposition: form-data;\r\n name="f1"\r\n\r\nv\r\n--XyZ--\r\n'],
    ['multipart data after', mp('XyZ'), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nv\r\n--XyZ--\r\ntrailing'],
    ['multipart no final', mp('XyZ'), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nv\r\n'],
    ['multipart unmatched', mp('XyZ'), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\n--XyZA\r\n--XyZ--\r\n'],
    [
      'multipart no semicolon',
      [['Content-Type', 'multipart/form-data boundary=XyZ']],
      '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nv\r\n--XyZ--\r\n',
    ],
  ];
  return bodies.map(([name, headers, body]) => ({
    name: `body: ${name}`,
    rules: BODY_RULES,
    request: simpleRequest({ method: 'POST', headers: [['Host', 'x'], ...headers], body: Buffer.from(body, 'latin1') }),
    onlyRule: 3,
    dataOnly: true,
  }));
}

// ------------------------------------------------------------------------------ libinjection

/** Mutated CRS payloads and random token soups: what @detectSQLi/@detectXSS see in practice. */
export function libinjectionInputs(suite: string): string[] {
  const r = new Random(42);
  const base = crsPayloads(suite).map((s) => Buffer.from(s, 'utf8').toString('latin1'));
  const pieces = [
    "'",
    '"',
    ' ',
    '--',
    '#',
    '/*',
    '*/',
    ' or ',
    ' and ',
    '1',
    '=',
    '(',
    ')',
    ' union select ',
    ',',
    ';',
    '@@version',
    '0x41',
    '`',
    '\\',
    '<',
    '>',
    '<script>',
    ' onerror=',
    'javascript:',
    '&#x6a;',
    '\0',
    '\xa0',
    '\xff',
    "N'",
    "q'[",
    '$$',
    '{',
    '}',
    ' like ',
    ' in (',
    'sleep(',
    '||',
    '!=',
    '<=>',
    '.',
    'e1',
    'select',
    'from',
    'user(',
    '\n',
    '<!--',
    '<svg',
    ' style=',
    'x:expression(',
  ];
  const out = [...base];
  for (let k = 0; k < 12_000; k++) {
    let s = base.length > 0 ? r.pick(base) : 'x';
    for (let o = 0; o <= r.int(3); o++) {
      const p = r.pick(pieces);
      const at = r.int(s.length + 1);
      s = r.chance(0.5) ? s.slice(0, at) + p + s.slice(at) : s.slice(0, at) + s.slice(at + 1);
    }
    out.push(s);
    let soup = '';
    for (let o = 0; o <= r.int(8); o++) soup += r.pick(pieces);
    out.push(soup);
  }
  return [...out, ...oneTokenInputs()];
}

/**
 * Every word of the SQLi table that is one token (letters, digits, `_`), as written and
 * lower-cased, and numbers: the inputs detectSqli answers without tokenizing (its ONE_TOKEN
 * shortcut), to be checked against the addon, which always tokenizes.
 */
function oneTokenInputs(): string[] {
  const out = ['0', '00', '1', '42', '2147483648', '_', '_ga', 'x', 'N', 'q', 'b', 'e', 'u'];
  for (const word of loadSqliData().words.keys()) {
    if (!/^[A-Za-z_][0-9A-Za-z_]*$/.test(word)) continue;
    out.push(word, word.toLowerCase(), `${word}_1`);
  }
  return out;
}

/** Rules that log, per header, @detectSQLi's fingerprint (id 1) and whether @detectXSS matched (id 2). */
export const LIBINJECTION_RULES = [
  `SecRule REQUEST_HEADERS "@detectSQLi" "id:1,phase:1,pass,log,capture,multiMatch,t:none,msg:'s',logdata:'%{MATCHED_VAR_NAME}=%{TX.0}'"`,
  `SecRule REQUEST_HEADERS "@detectXSS" "id:2,phase:1,pass,log,multiMatch,t:none,msg:'x',logdata:'%{MATCHED_VAR_NAME}'"`,
].join('\n');

// ------------------------------------------------------------------------------ the CRS, blocking

/** Requests whose CRS verdicts (ids, interrupt, anomaly score) are kept at every paranoia level, BLOCKING. */
export function crsBlockingCases(): { name: string; request: WafRequest; settings: WafEngineSettings }[] {
  const browser: [string, string][] = [
    ['Host', 'shop.example.com'],
    ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0'],
    ['Accept', 'text/html,application/xhtml+xml'],
    ['Accept-Language', 'en-US,en;q=0.5'],
  ];
  const out: { name: string; request: WafRequest; settings: WafEngineSettings }[] = [];
  for (const uri of [
    '/products?q=red',
    "/?id=1'%20or%20'1'%3D'1",
    '/?q=<script>alert(1)</script>',
    '/../../etc/passwd',
    '/?cmd=;cat%20/etc/passwd',
  ]) {
    for (const paranoiaLevel of [1, 2, 3, 4]) {
      out.push({
        name: `${uri} PL${paranoiaLevel}`,
        request: {
          clientIp: '203.0.113.7',
          clientPort: 50000,
          serverIp: '198.51.100.1',
          serverPort: 80,
          method: 'GET',
          uri,
          httpVersion: '1.1',
          headers: browser,
        },
        settings: { paranoiaLevel, mode: 'BLOCKING' },
      });
    }
  }
  return out;
}
