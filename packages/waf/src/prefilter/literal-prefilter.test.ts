import assert from 'node:assert/strict';
import { test } from 'node:test';
import { headerPairs, type WafRequest } from '../engine.ts';
import { compileRuleSet } from '../seclang/compiler.ts';
import { CompiledInspector } from '../inspector.ts';
import { LiteralScanner } from './scanner.ts';

function bitsOf(scanner: LiteralScanner, input: string): number[] {
  const out = new Int32Array(scanner.words);
  scanner.scan(input, out);
  const rules: number[] = [];
  for (let j = 0; j < scanner.words * 32; j++) if ((out[j >> 5]! & (1 << (j & 31))) !== 0) rules.push(j);
  return rules;
}

test('literal scanner: one pass gives every rule with a literal in the value, overlapping and ASCII case-insensitive', () => {
  const scanner = new LiteralScanner([['ab', 'xyz'], ['b'], ['abc'], ['q'], ['select']]);
  assert.deepEqual(bitsOf(scanner, 'XABCX'), [0, 1, 2], 'abc also holds ab and b');
  assert.deepEqual(bitsOf(scanner, 'a Q'), [3]);
  assert.deepEqual(bitsOf(scanner, 'SeLeCt'), [4]);
  assert.deepEqual(bitsOf(scanner, 'nothing here'), []);
  assert.deepEqual(bitsOf(scanner, ''), []);
});

test('literal scanner: more than 32 rules, and a state that ends literals of rules in several words', () => {
  const rules: string[][] = [];
  for (let j = 0; j < 40; j++) rules.push([`lit${j}-`]);
  rules.push(['phrase'], ['ASE']);
  rules[3]!.push('ase');
  const scanner = new LiteralScanner(rules);
  assert.equal(scanner.words, 2);
  assert.deepEqual(bitsOf(scanner, 'LIT3- and lit39- and a phrase'), [3, 39, 40, 41]);
  assert.deepEqual(bitsOf(scanner, 'base'), [3, 41]);
});

/** What the scanner must find: the rules with a literal in the value, bytes (the low 8 bits of a char) folded as ASCII. */
function naiveRules(rules: readonly (readonly string[])[], input: string): number[] {
  const fold = (text: string): string => {
    let out = '';
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i) & 0xff;
      out += String.fromCharCode(c >= 0x41 && c <= 0x5a ? c + 0x20 : c);
    }
    return out;
  };
  const value = fold(input);
  const found: number[] = [];
  rules.forEach((literals, j) => {
    if (literals.some((l) => value.includes(fold(l)))) found.push(j);
  });
  return found;
}

test('literal scanner: a long value, scanned as two halves at once, gives the rules one pass over it would (random values)', () => {
  let seed = 7;
  const random = (): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  const alphabet = 'abcAB<>/ \\'.split('');
  const word = (length: number): string => Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)]!).join('');
  // short literals and long ones sharing prefixes, so that a pass is often deep in one at the middle of a value
  const rules: string[][] = [];
  for (let j = 0; j < 70; j++) {
    const stem = word(1 + Math.floor(random() * 4));
    rules.push([stem + word(Math.floor(random() * 3)), stem + word(10 + Math.floor(random() * 30))]);
  }
  const scanner = new LiteralScanner(rules);
  const all = rules.flat();
  for (let n = 0; n < 3000; n++) {
    let value = '';
    const pieces = 1 + Math.floor(random() * 8);
    for (let k = 0; k < pieces; k++) {
      const literal = all[Math.floor(random() * all.length)]!;
      const piece = random() < 0.5 ? literal : literal.slice(0, Math.floor(random() * literal.length));
      value += random() < 0.3 ? piece.toUpperCase() : piece;
      if (random() < 0.3) value += String.fromCharCode(Math.floor(random() * 0x200));
    }
    assert.deepEqual(bitsOf(scanner, value), naiveRules(rules, value), JSON.stringify(value));
  }
});

test('literal scanner: a literal longer than 255 bytes (values scanned in one pass) is found', () => {
  const long = `${'x'.repeat(300)}y`;
  const scanner = new LiteralScanner([[long], ['xy']]);
  assert.deepEqual(bitsOf(scanner, `a${long}b`), [0, 1]);
  assert.deepEqual(bitsOf(scanner, `a${long.slice(1)}b`), [1]);
});

const RULES = `
SecRuleEngine On
SecRequestBodyAccess On
SecRule REQUEST_HEADERS:Content-Type "^application/x-www-form-urlencoded" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=URLENCODED"
SecRule ARGS "@rx n[e]edle" "id:10,phase:1,pass,log,msg:'needle in phase 1',t:none,t:lowercase"
SecRule ARGS "@rx n[e]edle" "id:20,phase:2,pass,log,msg:'needle in phase 2',t:none,t:lowercase"
SecRule ARGS "@rx n[e]edle" "id:30,phase:2,pass,log,msg:'two needles',t:none,t:lowercase,chain"
  SecRule MATCHED_VARS "@rx needle-2" "t:none"
SecRule REQUEST_URI "@pm haystack straw" "id:40,phase:2,pass,log,msg:'pm',t:none,t:urlDecodeUni"
SecRule ARGS_NAMES|REQUEST_COOKIES "@rx (?i)sel[e]ct" "id:50,phase:2,pass,log,msg:'names and cookies',t:none"
SecRule ARGS "@rx n[e]edle" "id:60,phase:3,pass,log,msg:'needle seen from the response phase',t:none,t:lowercase"
`;

function request(uri: string, body?: string, headers: [string, string][] = []): WafRequest {
  const bytes = body === undefined ? undefined : Buffer.from(body);
  return {
    clientIp: '192.0.2.1',
    clientPort: 1234,
    serverIp: '192.0.2.2',
    serverPort: 80,
    method: bytes ? 'POST' : 'GET',
    uri,
    httpVersion: '1.1',
    headers: [
      ['Host', 'example.com'],
      ...headers,
      ...(bytes
        ? ([
            ['Content-Type', 'application/x-www-form-urlencoded'],
            ['Content-Length', String(bytes.length)],
          ] as [string, string][])
        : []),
    ],
    ...(bytes ? { body: bytes } : {}),
  };
}

test('literal prefilter: skipping the rules that cannot match changes no verdict (lists grown by the body, MATCHED_VARS, @pm, names)', () => {
  const withPrefilter = new CompiledInspector(compileRuleSet([{ text: RULES, name: 'prefilter.conf' }]), {
    request: 1 << 20,
    response: 1 << 20,
  });
  const without = new CompiledInspector(compileRuleSet([{ text: RULES, name: 'prefilter.conf' }], { prefilter: false }), {
    request: 1 << 20,
    response: 1 << 20,
  });
  const cases: [WafRequest, number[]][] = [
    [request('/?a=hay'), []],
    [request('/?a=NEEDLE'), [10, 20]],
    // ARGS read in phase 1 (no needle), then grown by the body: phase 2 must see the new value
    [request('/?a=hay', 'b=needle'), [20]],
    // MATCHED_VARS grows during the phase: the chain's second rule reads it after the first matched
    [request('/?a=hay', 'b=needle-2'), [20, 30]],
    [request('/find%20the%20Haystack'), [40]],
    [request('/?SELECT=1', undefined, [['Cookie', 'x=1']]), [50]],
    [request('/?a=1', undefined, [['Cookie', 'x=select']]), [50]],
  ];
  for (const [req, expected] of cases) {
    const ids = (inspector: CompiledInspector): number[] =>
      [...new Set(inspector.inspectRequest(req, { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => m.id))].sort(
        (a, b) => a - b,
      );
    assert.deepEqual(ids(withPrefilter), expected, `${req.uri} ${req.body?.toString() ?? ''}`);
    assert.deepEqual(ids(without), expected, `${req.uri} ${req.body?.toString() ?? ''} (no prefilter)`);
  }
});

test('literal prefilter: a multiMatch rule is passed over only when no step of its chain gives a literal (the value as it is, or decoded)', () => {
  const rules = `
SecRuleEngine On
SecRule ARGS "@rx x y" "id:71,phase:1,pass,log,msg:'before the chain removes it',t:none,t:removeWhitespace,multiMatch"
SecRule ARGS "@rx a\\.\\.b" "id:72,phase:1,pass,log,msg:'once decoded',t:none,t:urlDecodeUni,multiMatch"
SecRule ARGS "@rx a\\.\\.b" "id:73,phase:1,pass,log,msg:'once decoded, at the end of the chain',t:none,t:urlDecodeUni"
`;
  const withPrefilter = compileRuleSet([{ text: rules, name: 'multimatch.conf' }]);
  const prefiltered = withPrefilter.phaseRules[1]!.filter((r) => r?.prefilter !== undefined).map((r) => [
    r!.id,
    r!.prefilter!.sources.length,
  ]);
  assert.deepEqual(prefiltered, [
    [71, 2],
    [72, 2],
    [73, 1],
  ]);
  const inspectors = [withPrefilter, compileRuleSet([{ text: rules, name: 'multimatch.conf' }], { prefilter: false })].map(
    (rs) => new CompiledInspector(rs, { request: 1 << 20, response: 1 << 20 }),
  );
  const cases: [string, number[]][] = [
    ['/?q=x%20y', [71]],
    ['/?q=xy', []],
    ['/?q=a%252e%252eb', [72, 73]],
    ['/?q=a..b', [72, 73]],
    ['/?q=hay&r=x', []],
    // values with and without the literals side by side: each is checked at each of its steps
    ['/?a=hay&q=x%20y&r=xy&s=a%252e%252eb&t=x%2520y', [71, 72, 73]],
  ];
  for (const [uri, expected] of cases) {
    const verdicts = inspectors.map((inspector) => inspector.inspectRequest(request(uri), { paranoiaLevel: 1, mode: 'LOGGING' }).verdict);
    for (const verdict of verdicts) assert.deepEqual([...new Set(verdict.matchedRules.map((m) => m.id))].sort(), expected, uri);
    assert.deepEqual(verdicts[0]!.matchedRules, verdicts[1]!.matchedRules, `${uri}: the same matches, data and order`);
  }
});

test('literal prefilter: a finished transaction hands its buffers to the next ones, an open one keeps its own', () => {
  const inspector = new CompiledInspector(compileRuleSet([{ text: RULES, name: 'prefilter.conf' }]), {
    request: 1 << 20,
    response: 1 << 20,
  });
  const settings = { paranoiaLevel: 1, mode: 'LOGGING' } as const;
  const ids = (matched: readonly { id: number }[]): number[] => [...new Set(matched.map((m) => m.id))].sort((a, b) => a - b);
  const open = inspector.inspectRequest(request('/?a=NEEDLE'), settings, true);
  assert.deepEqual(ids(open.verdict.matchedRules), [10, 20]);
  for (let k = 0; k < 3; k++) {
    assert.deepEqual(ids(inspector.inspectRequest(request('/?a=hay', 'b=needle-2'), settings).verdict.matchedRules), [20, 30]);
    assert.deepEqual(ids(inspector.inspectRequest(request('/?a=hay'), settings).verdict.matchedRules), []);
  }
  // the open transaction's unions (ARGS lower-cased, from phase 1) survived the others
  assert.ok(open.open);
  const response = inspector.inspectResponse(open.open, {
    status: 200,
    httpVersion: '1.1',
    headers: [['Content-Type', 'text/plain']],
    body: Buffer.from('ok'),
  });
  assert.deepEqual(ids(response.matchedRules), [60]);
});

/**
 * Checks each request against the rules compiled with and without literal prefilters: the logged
 * matches, as "id matchedData", must be `expected` in both.
 */
function sameWithAndWithoutPrefilter(rules: string, cases: readonly (readonly [WafRequest, readonly string[]])[]): void {
  const inspectors = [true, false].map(
    (prefilter) =>
      new CompiledInspector(compileRuleSet([{ text: rules, name: 'prefilter-case.conf' }], { prefilter }), {
        request: 1 << 20,
        response: 1 << 20,
      }),
  );
  for (const [req, expected] of cases) {
    for (const [k, inspector] of inspectors.entries()) {
      const logged = inspector
        .inspectRequest(req, { paranoiaLevel: 1, mode: 'LOGGING' })
        .verdict.matchedRules.map((m) => `${m.id} ${m.matchedData ?? ''}`.trim());
      assert.deepEqual(
        logged,
        expected,
        `${req.uri} ${headerPairs(req.headers)
          .map((h) => h.join(': '))
          .join(', ')}${k === 1 ? ' (no prefilter)' : ''}`,
      );
    }
  }
}

test('literal prefilter: a value without the literals is passed over even when another value of the variable has them; matches, captures and logged data stay the same', () => {
  sameWithAndWithoutPrefilter(
    `
SecRuleEngine On
SecRule ARGS|REQUEST_HEADERS "@rx (n[e]edle)-(\\d+)" "id:70,phase:1,pass,log,capture,msg:'needle',logdata:'%{MATCHED_VAR_NAME}=%{TX.1}/%{TX.2}',t:none,t:lowercase"
SecRule TX:2 "@rx ^\\d+$" "id:71,phase:1,pass,log,msg:'capture kept',logdata:'%{TX.2}'"
`,
    [
      [request('/?a=hay&b=NEEDLE-7&c=straw'), ['70 ARGS:b=needle/7', '71 7']],
      [request('/?a=needle-1&b=hay&c=needle-22'), ['70 ARGS:c=needle/22', '71 22']],
      [
        request('/?a=hay', undefined, [
          ['X-Probe', 'needle-3'],
          ['X-Other', 'hay'],
        ]),
        ['70 REQUEST_HEADERS:X-Probe=needle/3', '71 3'],
      ],
      [request('/?a=needle&b=hay'), []],
    ],
  );
});

test("literal prefilter: a decoding chain reads the raw values' bits for the values it leaves alone and decodes the others (a literal only decoding makes)", () => {
  sameWithAndWithoutPrefilter(
    `
SecRuleEngine On
SecRule ARGS "@rx n[e]edle" "id:80,phase:1,pass,log,msg:'decoded needle',logdata:'%{MATCHED_VAR_NAME}',t:none,t:urlDecodeUni,t:lowercase"
SecRule ARGS "@rx n[e]edle" "id:81,phase:1,pass,log,msg:'raw needle',logdata:'%{MATCHED_VAR_NAME}',t:none"
SecRule ARGS "@rx h[a]ystack" "id:82,phase:1,pass,log,msg:'base64 haystack',logdata:'%{MATCHED_VAR_NAME}',t:none,t:base64Decode"
`,
    [
      // no value has a byte urlDecodeUni acts on: the raw bits stand for the decoded values
      [request('/?a=hay&b=straw'), []],
      [request('/?a=hay&b=NEEDLE'), ['80 ARGS:b']],
      // b is "n%65edle" after the query string's own decoding: only urlDecodeUni makes the needle
      [request('/?a=hay&b=n%2565edle'), ['80 ARGS:b']],
      [request('/?a=needle&b=n%2565edle'), ['80 ARGS:b', '81 ARGS:a']],
      // base64Decode always runs: every value is decoded ("aGF5c3RhY2s=" is "haystack")
      [request('/?a=hay&b=aGF5c3RhY2s%3D'), ['82 ARGS:b']],
    ],
  );
});

test('literal prefilter: a single variable set while a phase runs (ctl:requestBodyProcessor) is looked at again by the rules after it', () => {
  sameWithAndWithoutPrefilter(
    `
SecRuleEngine On
SecRule REQBODY_PROCESSOR "@rx J[S]ON" "id:90,phase:1,pass,log,msg:'before'"
SecRule REQUEST_HEADERS:X-Json "@rx yes" "id:91,phase:1,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule REQBODY_PROCESSOR "@rx J[S]ON" "id:92,phase:1,pass,log,msg:'after'"
`,
    [
      [request('/', undefined, [['X-Json', 'yes']]), ['92']],
      [request('/'), []],
    ],
  );
});

test('literal prefilter: a rule passed over for its literals still clears MATCHED_VAR, as an evaluated rule that does not match', () => {
  sameWithAndWithoutPrefilter(
    `
SecRuleEngine On
SecRule ARGS:a "@rx ^hay$" "id:100,phase:1,pass,nolog,setvar:tx.seen=%{MATCHED_VAR}"
SecRule ARGS "@rx n[e]edle" "id:101,phase:1,pass,log,msg:'needle'"
SecRule MATCHED_VAR "@rx ^$" "id:102,phase:1,pass,log,msg:'cleared'"
SecRule TX:seen "@rx ^hay$" "id:103,phase:1,pass,log,msg:'seen'"
`,
    [
      [request('/?a=hay'), ['102', '103']],
      [request('/?a=hay&b=needle'), ['101', '103']],
    ],
  );
});
