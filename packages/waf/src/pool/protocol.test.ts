/**
 * What crosses between the pool and its threads (protocol.ts): bodies, headers and verdicts come
 * out of the structured clone as they went in, whatever the bytes, and the pool's verdicts are the
 * in-process engine's, request and response side.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { createCompiledEngine } from '../compiled-engine.ts';
import type { WafEngineSettings, WafEngineVerdict, WafRequest, WafResponse } from '../engine.ts';
import { flatHeaders, headerPairs } from '../engine.ts';
import { bodyBytes, bodyText, packVerdict, unpackVerdict } from './protocol.ts';

const latin1 = fc.string({ unit: fc.integer({ min: 0, max: 255 }).map((c) => String.fromCharCode(c)) });

test('a body crosses as exactly its first `max` bytes, from a view anywhere in a larger buffer', () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ maxLength: 300 }),
      fc.nat(40),
      fc.nat(40),
      fc.nat(400),
      fc.boolean(),
      (bytes, before, after, max, plain) => {
        const backing = new Uint8Array(before + bytes.length + after);
        backing.set(bytes, before);
        const view = plain ? new Uint8Array(backing.buffer, before, bytes.length) : Buffer.from(backing.buffer, before, bytes.length);
        const received = bodyBytes(structuredClone(bodyText(view, max)));
        assert.deepEqual([...received], [...bytes.subarray(0, max)]);
      },
    ),
  );
});

test('headers cross in order, duplicates and any bytes kept', () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(latin1, latin1), { maxLength: 20 }), (pairs) => {
      assert.deepEqual(headerPairs(structuredClone(flatHeaders(pairs))), pairs);
    }),
  );
});

// (plain objects, as the engines make them: fast-check's records have no prototype by default)
const matchedRule = fc.record(
  {
    id: fc.nat(),
    message: fc.string(),
    matchedData: fc.option(fc.string()),
    matchedVariable: fc.option(fc.string()),
    severity: fc.option(fc.nat(7)),
    tags: fc.array(fc.string(), { maxLength: 3 }),
    phase: fc.integer({ min: 1, max: 5 }),
  },
  { noNullPrototype: true },
);

test('a verdict crosses as the same verdict, packed or not', () => {
  const verdict: fc.Arbitrary<WafEngineVerdict> = fc.record(
    {
      matchedRules: fc.array(matchedRule, { maxLength: 3 }),
      anomalyScore: fc.nat(100),
      interrupt: fc.record(
        { status: fc.constant(403), ruleId: fc.nat(), phase: fc.integer({ min: 1, max: 5 }) },
        { noNullPrototype: true },
      ),
      bodyTruncated: fc.constant(true),
    },
    { requiredKeys: ['matchedRules'], noNullPrototype: true },
  );
  fc.assert(
    fc.property(verdict, (v) => {
      assert.deepEqual(unpackVerdict(structuredClone(packVerdict(v))), v);
    }),
  );
});

function request(uri: string, method = 'GET', body?: Buffer, contentType?: string): WafRequest {
  return {
    clientIp: '192.0.2.10',
    clientPort: 40000,
    serverIp: '192.0.2.1',
    serverPort: 80,
    method,
    uri,
    httpVersion: '1.1',
    headers: [
      ['Host', 'shop.example'],
      ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/127.0'],
      ['Accept', 'text/html'],
      ['Cookie', 'a=1'],
      ['Cookie', 'b=\u00e9\u00ff'],
      ...(body === undefined
        ? []
        : ([
            ['Content-Type', contentType ?? 'application/x-www-form-urlencoded'],
            ['Content-Length', String(body.length)],
          ] as [string, string][])),
    ],
    ...(body && { body }),
    id: '0123456789abcdef0123456789abcdef',
  };
}

test('the pool gives the verdicts the in-process engine gives, request and response side', { timeout: 120_000 }, async () => {
  const limits = { requestBodyLimit: 2048, responseBodyLimit: 1024 };
  const inProcess = await createCompiledEngine({ ...limits, requestBudgetMs: 0 });
  const pool = await createCompiledEngine({ ...limits, workers: 1, requestBudgetMs: 0 });
  const cases: { request: WafRequest; settings: WafEngineSettings; response: WafResponse }[] = [];
  const settings: WafEngineSettings[] = [
    { paranoiaLevel: 1, mode: 'BLOCKING' },
    { paranoiaLevel: 4, mode: 'LOGGING' },
  ];
  const leak = Buffer.from('<html>You have an error in your SQL syntax; check the manual</html>');
  const requests = [
    request('/catalog/books?category=fiction&page=2'),
    request("/?id=1'%20or%20'1'%3D'1"),
    request('/form', 'POST', Buffer.from('name=J%C3%A9r%C3%B4me&comment=caf\u00e9+\u00ff\u0080', 'latin1')),
    request('/form', 'POST', Buffer.from(`q=${'a'.repeat(3000)}%27+union+select+1--`)),
    request('/api', 'POST', Buffer.from('{"q":"<script>alert(1)</script>"}'), 'application/json'),
  ];
  for (const s of settings) {
    for (const [i, r] of requests.entries()) {
      const body = i % 2 === 0 ? leak : Buffer.from(`<html>${'ok '.repeat(600)}</html>`);
      cases.push({
        request: r,
        settings: s,
        response: { status: 200, httpVersion: '1.1', headers: [['Content-Type', 'text/html']], body },
      });
    }
  }
  try {
    for (const c of cases) {
      const local = await inProcess.beginExchange(c.request, c.settings);
      const remote = await pool.beginExchange(c.request, c.settings);
      const label = `${c.settings.mode} PL${c.settings.paranoiaLevel} ${c.request.method} ${c.request.uri}`;
      assert.deepEqual(remote.requestVerdict, local.requestVerdict, label);
      if (local.requestVerdict.interrupt !== undefined && c.settings.mode === 'BLOCKING') {
        local.end();
        remote.end();
        continue;
      }
      assert.deepEqual(await remote.inspectResponse(c.response), await local.inspectResponse(c.response), `${label}: response`);
    }
  } finally {
    await inProcess.close();
    await pool.close();
  }
});
