import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ORACLE_AVAILABLE, simpleRequest, smallRuleSets } from '../differential/oracle.ts';
import { parseJsonBody } from './json.ts';
import { parseXml } from './xml.ts';

function jsonArgs(body: string): [string, string][] {
  const args: [string, string][] = [];
  parseJsonBody(body, { addArgument: (_o, k, v) => (args.push([k, v]), true) });
  return args;
}

test('JSON body: argument names as ModSecurity v3.0.9 gives them', () => {
  assert.deepEqual(jsonArgs('{"a":{"b":1},"c":[true,null,"x"],"":2}'), [
    ['json.a.b', '1'],
    ['json.c.array_0', 'true'],
    ['json.c.array_1', ''],
    ['json.c.array_2', 'x'],
    ['json.empty-key', '2'],
  ]);
  assert.deepEqual(jsonArgs('[[1],{"k":"\\u00e9"}]'), [
    ['json.array_0.array_0', '1'],
    ['json.array_1.k', '\xc3\xa9'],
  ]);
  assert.deepEqual(jsonArgs('"top"'), [['json', 'top']]);
  assert.equal(parseJsonBody('{"a":1', { addArgument: () => true }).error, 'premature EOF');
  assert.match(parseJsonBody('{"a":1}x', { addArgument: () => true }).error ?? '', /trailing garbage/);
});

test('XML body: root text and attribute values, errors keep the partial tree', () => {
  const ok = parseXml('<?xml version="1.0"?><a x="1"><b>hi &amp; <![CDATA[<raw>]]></b><c y="two"/></a>');
  assert.equal(ok.error, undefined);
  assert.equal(ok.document?.rootText, 'hi & <raw>');
  assert.deepEqual(ok.document?.attributes, ['1', 'two']);
  const bad = parseXml('<a><b>text</c></a>');
  assert.ok(bad.error);
  assert.equal(bad.document?.rootText, 'text');
});

test('body processors: same variables as the ModSecurity addon', { skip: !ORACLE_AVAILABLE }, () => {
  const rules = [
    `SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=JSON"`,
    `SecRule REQUEST_HEADERS:Content-Type "^text/xml" "id:2,phase:1,pass,nolog,ctl:requestBodyProcessor=XML"`,
    `SecRule ARGS|ARGS_NAMES|FILES|FILES_NAMES|FILES_SIZES|MULTIPART_NAME|MULTIPART_FILENAME|MULTIPART_PART_HEADERS|XML:/*|XML://@*|REQBODY_ERROR|REQBODY_PROCESSOR|MULTIPART_STRICT_ERROR|MULTIPART_UNMATCHED_BOUNDARY|MULTIPART_LF_LINE|MULTIPART_DATA_AFTER|MULTIPART_INVALID_QUOTING|MULTIPART_MISSING_SEMICOLON|MULTIPART_HEADER_FOLDING|MULTIPART_INVALID_PART|FILES_COMBINED_SIZE|URLENCODED_ERROR "@unconditionalMatch" "id:3,phase:2,pass,log,multiMatch,t:none,msg:'v',logdata:'%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'"`,
  ].join('\n');
  const both = smallRuleSets(rules);
  const mp = (b: string, body: string): [string, string][] => [
    ['Content-Type', `multipart/form-data; boundary=${b}`],
    ['Content-Length', String(body.length)],
  ];
  const bodies: [string, [string, string][], string][] = [
    ['json', [['Content-Type', 'application/json']], '{"user":{"name":"x","roles":["a","b"]},"n":1.5e3,"ok":false,"z":null}'],
    ['json error', [['Content-Type', 'application/json']], '{"a":"b",}'],
    ['xml', [['Content-Type', 'text/xml']], '<?xml version="1.0"?><r a="1"><b>text</b><c d="e">more</c></r>'],
    ['xml error', [['Content-Type', 'text/xml']], '<r><b>text</r>'],
    ['urlencoded', [['Content-Type', 'application/x-www-form-urlencoded']], 'a=1&b=%41%zz&&c&=d&e=f+g'],
    ['multipart', mp('XyZ', ''), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nline1\r\nline2\r\n--XyZ\r\nContent-Disposition: form-data; name="up"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nfile\r\ncontent\r\n--XyZ--\r\n'],
    ['multipart lf', mp('XyZ', ''), '--XyZ\nContent-Disposition: form-data; name="f1"\n\nv\n--XyZ--\n'],
    ['multipart quoting', mp('XyZ', ''), "--XyZ\r\nContent-Disposition: form-data; name='f1'\r\n\r\nv\r\n--XyZ--\r\n"],
    ['multipart folding', mp('XyZ', ''), '--XyZ\r\nContent-Disposition: form-data;\r\n name="f1"\r\n\r\nv\r\n--XyZ--\r\n'],
    ['multipart data after', mp('XyZ', ''), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nv\r\n--XyZ--\r\ntrailing'],
    ['multipart no final', mp('XyZ', ''), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nv\r\n'],
    ['multipart unmatched', mp('XyZ', ''), '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\n--XyZA\r\n--XyZ--\r\n'],
    ['multipart no semicolon', [['Content-Type', 'multipart/form-data boundary=XyZ']], '--XyZ\r\nContent-Disposition: form-data; name="f1"\r\n\r\nv\r\n--XyZ--\r\n'],
  ];
  try {
    for (const [name, headers, body] of bodies) {
      const request = simpleRequest({ method: 'POST', headers: [['Host', 'x'], ...headers], body: Buffer.from(body, 'latin1') });
      const a = both.modsecurity(request).filter((m) => m.id === 3).map((m) => m.data).sort();
      const b = both.compiled(request).filter((m) => m.id === 3).map((m) => m.data).sort();
      assert.deepEqual(b, a, name);
    }
  } finally {
    both.close();
  }
});
