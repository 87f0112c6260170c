/**
 * Property-based fuzzing of every write route of a started `tps serve` (fast-check, fixed seeds):
 * valid documents of each route, mutated (values replaced by nulls, strings, numbers, arrays,
 * objects, deep nulls; keys dropped or added, `__proto__` among them; whole bodies replaced by
 * random JSON or broken text), sent as a tenant would. Whatever the document:
 *   - never a 5xx;
 *   - every refusal is an error document (JSON:API errors; RFC 6749 errors on the token endpoint);
 *   - a refusal changes nothing in the store (its rows are compared before and after each call).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fc from 'fast-check';
import { startTps, createTenant, openStoreOf, type Tps, type Credentials } from '../support/tps.ts';
import { TenantApi, request, type Answer } from '../support/api-client.ts';
import { TestCa } from '../support/pki.ts';
import type { Store } from '../../src/store/index.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const CERTIFICATES = '/api/v2/traffic-mgmt/certificates';
const CA_CERTIFICATES = '/api/v2/traffic-mgmt/ca-certificates';
const FRONTEND = '127.0.9.5';
const JSONAPI = 'application/vnd.api+json';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// ---- mutations of a valid document -------------------------------------------------------------

/** Values that have broken handlers elsewhere: wrong types, empties, extremes, deep nulls. */
const nastyValue: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(
    null,
    '',
    'x',
    0,
    -1,
    1.5,
    65536,
    2 ** 53,
    -(2 ** 31),
    true,
    false,
    [],
    {},
    [null],
    { a: null },
    [[]],
    { data: null },
    'null',
    '__proto__',
    '../../etc/passwd',
    '\u0000',
    '\ud800',
  ),
  fc.string({ maxLength: 40 }),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constant('A'.repeat(70_000)),
  fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>,
);

const nastyKey = fc.oneof(
  fc.constantFrom('__proto__', 'constructor', 'prototype', 'data', 'type', 'id', 'attributes', 'relationships', 'status', ''),
  fc.string({ maxLength: 12 }),
);

type Mutation =
  | { kind: 'set'; at: number; value: Json }
  | { kind: 'drop'; at: number }
  | { kind: 'add'; at: number; key: string; value: Json }
  | { kind: 'replace'; value: Json }
  | { kind: 'text'; text: string };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('set' as const), at: fc.nat(), value: nastyValue }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('drop' as const), at: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('add' as const), at: fc.nat(), key: nastyKey, value: nastyValue }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('replace' as const), value: nastyValue }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('text' as const),
      text: fc.constantFrom(
        '{"data":',
        '{"data": {"type": "httpProxy",}}',
        '',
        ' ',
        'nul',
        '{"__proto__": {"admin": true}, "data": {}}',
        '{"data": {"constructor": {"prototype": {"x": 1}}}}',
      ),
    }),
  },
);

/** Every path of a JSON value ([] is the root), parents before children. */
function pathsOf(value: Json, path: (string | number)[] = []): (string | number)[][] {
  const paths = [path];
  if (Array.isArray(value)) for (const [index, item] of value.entries()) paths.push(...pathsOf(item, [...path, index]));
  else if (value !== null && typeof value === 'object')
    for (const [key, item] of Object.entries(value)) paths.push(...pathsOf(item, [...path, key]));
  return paths;
}

function apply(document: Json | string, change: Mutation): Json | string {
  if (change.kind === 'text') return change.text;
  if (change.kind === 'replace' || typeof document === 'string') return change.kind === 'replace' ? change.value : document;
  const root = structuredClone(document);
  const paths = pathsOf(root);
  const path = paths[change.at % paths.length]!;
  if (path.length === 0) {
    if (change.kind === 'set') return change.value;
    if (change.kind === 'drop') return {};
  }
  const parent = path.slice(0, -1).reduce<Json>((node, key) => (node as Record<string, Json>)[key as string]!, root) as
    | Record<string, Json>
    | Json[];
  const last = path.at(-1)!;
  const target = path.length === 0 ? root : (parent as Record<string, Json>)[last as string]!;
  if (change.kind === 'set') (parent as Record<string, Json>)[last as string] = change.value;
  else if (change.kind === 'drop') {
    if (Array.isArray(parent)) parent.splice(last as number, 1);
    else delete parent[last as string];
  } else if (target !== null && typeof target === 'object' && !Array.isArray(target)) {
    // Defined as an own property (JSON.stringify then writes a literal "__proto__" key, as an attacker would).
    Object.defineProperty(target, change.key, { value: change.value, enumerable: true, configurable: true, writable: true });
  } else if (Array.isArray(target)) target.push(change.value);
  return root;
}

/** One to three mutations of one of the route's valid documents. */
const mutated = (seeds: Json[]): fc.Arbitrary<string> =>
  fc
    .record({ seed: fc.nat({ max: seeds.length - 1 }), changes: fc.array(mutation, { minLength: 1, maxLength: 3 }) })
    .map(({ seed, changes }) => {
      const document = changes.reduce<Json | string>((current, change) => apply(current, change), seeds[seed]!);
      return typeof document === 'string' && changes.at(-1)!.kind === 'text' ? document : JSON.stringify(document);
    });

// ---- what the store holds, and what an answer must look like -------------------------------------

/** Every row a write route can change (not sign-in throttling nor token bookkeeping, which refusals may record by design). */
async function storeRows(store: Store): Promise<string> {
  const tables = await Promise.all([
    store.db.all('SELECT * FROM tenants ORDER BY id'),
    store.db.all('SELECT * FROM traffic_configs ORDER BY id'),
    store.db.all('SELECT * FROM frontend_bindings ORDER BY ip, port, protocol'),
    store.db.all('SELECT * FROM config_references ORDER BY config_id, ref_kind, ref_id'),
    store.db.all('SELECT * FROM certificates ORDER BY id'),
    // Without the CRL fetch status, which the CRL service writes by itself after an upload.
    store.db.all<{ entries: string }>('SELECT * FROM ca_certificates ORDER BY id').then((rows) =>
      rows.map((row) => ({
        ...row,
        entries: (JSON.parse(row.entries) as Record<string, unknown>[]).map(({ crl: _crl, ...entry }) => entry),
      })),
    ),
    store.db.all('SELECT id, tenant_id, name, client_id, secret_hash, scopes, created_at, revoked_at FROM service_accounts ORDER BY id'),
    store.db.all('SELECT * FROM portal_users ORDER BY id'),
    store.db.all('SELECT * FROM store_revision'),
  ]);
  return crypto.createHash('sha256').update(JSON.stringify(tables)).digest('hex');
}

function assertErrorDocument(answer: Answer, what: string, oauth: boolean): void {
  const body = answer.body as { errors?: unknown; error?: unknown; error_description?: unknown };
  const text = typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
  assert.ok(!/\n\s+at /.test(text), `${what}: never a stack trace`);
  if (oauth && typeof body === 'object' && body !== null && 'error' in body) {
    assert.equal(typeof body.error, 'string', what);
    assert.equal(typeof body.error_description, 'string', what);
    return;
  }
  assert.ok(
    typeof body === 'object' && body !== null && Array.isArray(body.errors) && body.errors.length > 0,
    `${what}: a JSON:API error document, got ${text.slice(0, 300)}`,
  );
  for (const error of body.errors as Record<string, unknown>[]) {
    assert.equal(error.status, String(answer.status), `${what}: ${text.slice(0, 300)}`);
    assert.equal(typeof error.code, 'string', what);
    assert.equal(typeof error.title, 'string', what);
    assert.equal(typeof error.detail, 'string', what);
    if (error.source !== undefined) assert.equal(typeof error.source, 'object', what);
  }
}

describe('fuzzed write routes', () => {
  let tps: Tps;
  let store: Store;
  let api: TenantApi;
  let other: TenantApi;
  let credentials: Credentials;
  let portal: { cookie: string; csrf: string };
  let lastRows: string;
  const seen = { requests: 0, accepted: 0, refused: new Map<number, number>() };
  /** Ids the routes take: the tenant's own, another tenant's, unknown ones and garbage. */
  const ids = { own: [] as string[], foreign: [] as string[] };

  before(async () => {
    tps = await startTps({
      env: {
        TPS_FRONTEND_IPS: `${FRONTEND},127.0.9.6`,
        TPS_API_RATE_LIMIT_PER_MINUTE: '1000000',
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      },
    });
    store = await openStoreOf(tps);
    credentials = await createTenant(tps);
    api = await TenantApi.connect(tps, credentials);
    other = await TenantApi.connect(tps, await createTenant(tps));
    const user = await tps.cli<{ email: string; password: string }>(
      'user',
      'create',
      '--tenant',
      credentials.tenantId,
      '--email',
      'fuzz@tenant.example',
    );
    const login = await request(`${tps.url}/portal/api/login`, {
      method: 'POST',
      contentType: 'application/json',
      body: { email: user.email, password: user.password },
    });
    assert.equal(login.status, 200, JSON.stringify(login.body));
    portal = { cookie: login.headers.get('set-cookie')!.split(';')[0]!, csrf: login.body.csrfToken };

    for (const [tenant, list, port] of [
      [api, ids.own, 9001],
      [other, ids.foreign, 9002],
    ] as const) {
      const created = await tenant.call('POST', CONFIGS, {
        data: {
          type: 'l4Proxy',
          attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: '127.0.9.20', port: 9 }] } },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      list.push(created.body.data.id);
      // Straight into the store: the API refuses orders without an ACME service, and one running
      // would change the rows in the background.
      const acme = await store.certificates.createAcme(tenant.tenantId, [`seed-${port}.example.test`]);
      list.push(acme.id);
    }
    lastRows = await storeRows(store);
  });

  after(async () => {
    await store.close();
    await tps.stop();
    const refused = [...seen.refused.entries()]
      .sort(([a], [b]) => a - b)
      .map(([status, n]) => `${status}:${n}`)
      .join(' ');
    console.log(`fuzzed ${seen.requests} requests: ${seen.accepted} accepted, refused ${refused}`);
  });

  /** Sends one request and checks the three properties. */
  async function check(what: string, send: () => Promise<Answer>, options: { oauth?: boolean } = {}): Promise<Answer> {
    const answer = await send();
    seen.requests++;
    assert.ok(answer.status < 500, `${what}: ${answer.status} ${JSON.stringify(answer.body)?.slice(0, 500)}`);
    const rows = await storeRows(store);
    if (answer.status >= 400) {
      seen.refused.set(answer.status, (seen.refused.get(answer.status) ?? 0) + 1);
      assertErrorDocument(answer, what, options.oauth ?? false);
      assert.equal(rows, lastRows, `${what}: refused with ${answer.status}, yet the store changed`);
    } else {
      seen.accepted++;
    }
    lastRows = rows;
    return answer;
  }

  const idArbitrary = fc.oneof(
    fc
      .constantFrom(...(['own', 'foreign'] as const))
      .chain((whose) => fc.nat().map((n) => ids[whose][n % Math.max(1, ids[whose].length)] ?? '00000000-0000-4000-8000-000000000001')),
    fc.uuid(),
    fc.constantFrom('not-a-uuid', '..%2F..', '%00', 'null', '00000000-0000-0000-0000-000000000000', 'a'.repeat(300)),
  );
  /** Ids created by the fuzz itself join the pool, so that later PUT/PATCH/DELETE runs hit live ones. */
  const remember = (answer: Answer) => {
    const id = (answer.body as { data?: { id?: unknown } } | undefined)?.data?.id;
    if (answer.status === 201 && typeof id === 'string') ids.own.push(id);
  };
  const apiCall = (tenant: TenantApi, method: string, path: string, rawBody: string | undefined, contentType = JSONAPI) =>
    tenant.call(method, path, undefined, rawBody === undefined ? {} : { rawBody, contentType });
  const run = async <T>(arbitrary: fc.Arbitrary<T>, seed: number, numRuns: number, property: (value: T) => Promise<void>) => {
    await fc.assert(fc.asyncProperty(arbitrary, property), { seed, numRuns, endOnFailure: true });
  };

  const httpProxy = (port: number): Json => ({
    data: {
      type: 'httpProxy',
      attributes: {
        frontend: { ipv4: FRONTEND, port },
        backend: {
          hosts: [
            { address: '127.0.9.20', port: 8080 },
            { address: 'origin.example.test', port: 8443 },
          ],
          deliveryMethod: 'ROUND_ROBIN',
          tlsSettings: { verifyCertificate: { mode: 'SYSTEM_TRUSTSTORE' } },
        },
        waf: { mode: 'LOGGING', paranoiaLevel: 2, ruleExclusions: [{ ruleIds: [942100], pathPrefix: '/api', target: 'ARGS:q' }] },
        rateLimiting: { thresholds: [{ requests: 100, periodSeconds: 10 }], blockSeconds: 60 },
        geoFencing: { mode: 'BLOCK_LISTED', countries: ['KP'] },
      },
      relationships: { belongsTo: { data: { type: 'account', id: '00000000-0000-4000-8000-000000000000' } } },
    },
  });
  const l4Proxy = (port: number): Json => ({
    data: {
      type: 'l4Proxy',
      attributes: {
        frontend: { ipv4: FRONTEND, port },
        backend: { hosts: [{ address: '127.0.9.20', port: 53 }] },
        protocols: ['TCP', 'UDP'],
        proxyProtocol: { enabled: true, version: 2 },
        threatIntelligence: { enabled: false },
        connectionLimits: { maxConnectionsPerSource: 10, maxNewConnectionsPerSecondPerSource: 5, maxConnections: 100 },
      },
    },
  });
  const configSeeds = (): Json[] => {
    const seeds = [httpProxy(10_001), l4Proxy(10_002)];
    // The account relationship names the token's own tenant in one seed, another in the other.
    (seeds[0] as { data: { relationships: { belongsTo: { data: { id: string } } } } }).data.relationships.belongsTo.data.id =
      credentials.tenantId;
    return seeds;
  };

  it('traffic configurations: POST, PUT, PATCH, DELETE', async () => {
    await run(mutated(configSeeds()), 101, 500, async (body) => {
      remember(await check(`POST ${CONFIGS} ${body.slice(0, 200)}`, () => apiCall(api, 'POST', CONFIGS, body)));
    });
    await run(fc.tuple(idArbitrary, mutated(configSeeds())), 102, 400, async ([id, body]) => {
      await check(`PUT ${id} ${body.slice(0, 200)}`, () => apiCall(api, 'PUT', `${CONFIGS}/${encodeURIComponent(id)}`, body));
    });
    const patches: Json[] = [
      { data: { type: 'httpProxy', attributes: { waf: { paranoiaLevel: 3 }, rateLimiting: null } } },
      { data: { type: 'l4Proxy', attributes: { frontend: { port: 9101 }, protocols: ['UDP'], connectionLimits: { maxConnections: 5 } } } },
      {
        data: {
          type: 'httpProxy',
          id: ids.own[0]!,
          attributes: { backend: { tlsSettings: { verifyCertificate: null, clientCertificateId: null } }, geoFencing: null },
        },
      },
    ];
    await run(fc.tuple(idArbitrary, mutated(patches)), 103, 500, async ([id, body]) => {
      await check(`PATCH ${id} ${body.slice(0, 200)}`, () => apiCall(api, 'PATCH', `${CONFIGS}/${encodeURIComponent(id)}`, body));
    });
    await run(fc.tuple(idArbitrary, fc.option(mutated(patches), { nil: undefined })), 104, 150, async ([id, body]) => {
      const answer = await check(`DELETE ${id}`, () => apiCall(api, 'DELETE', `${CONFIGS}/${encodeURIComponent(id)}`, body));
      if (answer.status === 204) ids.own.splice(ids.own.indexOf(id), 1);
    });
    // The other tenant's proxy is still there, as it was.
    assert.equal((await other.get(`${CONFIGS}/${ids.foreign[0]}`)).status, 200);
  });

  it('certificates: upload by POST and by GET with a body, service-issued orders, CA certificates', async () => {
    const root = await TestCa.create('Fuzz Root CA');
    const intermediate = await root.intermediate('Fuzz Intermediate CA');
    const leaf = await intermediate.issue({ commonName: 'www.fuzz.example', dnsNames: ['www.fuzz.example'] });
    const pem: Json[] = [
      {
        data: {
          type: 'certificate',
          attributes: { certificate: leaf.certificatePem, intermediateCertificates: intermediate.chainPem, privateKey: leaf.privateKeyPem },
        },
      },
      {
        data: {
          type: 'certificate',
          attributes: { certificate: leaf.certificatePem + intermediate.chainPem, privateKey: leaf.privateKeyPem },
          relationships: { belongsTo: { data: { type: 'account', id: credentials.tenantId } } },
        },
      },
    ];
    await run(mutated(pem), 201, 300, async (body) => {
      remember(await check(`POST ${CERTIFICATES}/pem ${body.slice(0, 200)}`, () => apiCall(api, 'POST', `${CERTIFICATES}/pem`, body)));
    });
    await run(mutated(pem), 202, 150, async (body) => {
      remember(await check(`GET ${CERTIFICATES}/pem ${body.slice(0, 200)}`, () => apiCall(api, 'GET', `${CERTIFICATES}/pem`, body)));
    });
    const orders: Json[] = [{ data: { type: 'certificate', attributes: { domains: ['www.fuzz.example', 'api.fuzz.example'] } } }];
    await run(mutated(orders), 203, 300, async (body) => {
      remember(
        await check(`POST ${CERTIFICATES}/lets-encrypt ${body.slice(0, 200)}`, () =>
          apiCall(api, 'POST', `${CERTIFICATES}/lets-encrypt`, body),
        ),
      );
    });
    const cas: Json[] = [
      {
        data: {
          type: 'caCertificate',
          attributes: {
            certificates: [
              { certificate: root.certificatePem },
              { certificate: intermediate.certificatePem, crlUrl: 'http://127.0.9.9:9/crl.pem' },
            ],
          },
        },
      },
    ];
    await run(mutated(cas), 204, 300, async (body) => {
      remember(await check(`POST ${CA_CERTIFICATES} ${body.slice(0, 200)}`, () => apiCall(api, 'POST', CA_CERTIFICATES, body)));
    });
    await run(
      fc.tuple(idArbitrary, fc.constantFrom(CERTIFICATES, CA_CERTIFICATES), fc.constantFrom('DELETE', 'POST')),
      205,
      150,
      async ([id, base, method]) => {
        const path = method === 'POST' ? `${CERTIFICATES}/${encodeURIComponent(id)}/renew` : `${base}/${encodeURIComponent(id)}`;
        await check(`${method} ${path}`, () => apiCall(api, method, path, undefined));
      },
    );
    // Wrong media types on every JSON:API write route.
    await run(
      fc.tuple(
        fc.constantFrom(
          `POST ${CONFIGS}`,
          `POST ${CERTIFICATES}/pem`,
          `GET ${CERTIFICATES}/pem`,
          `POST ${CA_CERTIFICATES}`,
          `PATCH ${CONFIGS}/${ids.own[0]}`,
        ),
        fc.constantFrom(
          'application/json',
          'text/plain',
          'application/x-www-form-urlencoded',
          'multipart/form-data; boundary=x',
          'application/vnd.api+json; ext=x',
        ),
        mutated(pem),
      ),
      206,
      100,
      async ([route, contentType, body]) => {
        const [method, path] = route.split(' ') as [string, string];
        await check(`${route} as ${contentType}`, () => apiCall(api, method, path, body, contentType));
      },
    );
  });

  it('the token endpoint and the portal', async () => {
    const token: Json[] = [
      { client_id: credentials.clientId, client_secret: credentials.clientSecret, grant_type: 'client_credentials', audience: tps.url },
    ];
    await run(mutated(token), 301, 300, async (body) => {
      await check(
        `POST /oauth/token ${body.slice(0, 200)}`,
        () => request(`${tps.url}/oauth/token`, { method: 'POST', rawBody: body, contentType: 'application/json' }),
        { oauth: true },
      );
    });
    const portalHeaders = { cookie: portal.cookie, 'x-csrf-token': portal.csrf };
    const accounts: Json[] = [{ name: 'fuzzed', scopes: ['read', 'insight'] }];
    await run(mutated(accounts), 302, 200, async (body) => {
      await check(`POST /portal/api/service-accounts ${body.slice(0, 200)}`, () =>
        request(`${tps.url}/portal/api/service-accounts`, {
          method: 'POST',
          rawBody: body,
          contentType: 'application/json',
          headers: portalHeaders,
        }),
      );
    });
    await run(idArbitrary, 303, 60, async (id) => {
      await check(`DELETE /portal/api/service-accounts/${id}`, () =>
        request(`${tps.url}/portal/api/service-accounts/${encodeURIComponent(id)}`, { method: 'DELETE', headers: portalHeaders }),
      );
    });
    // Sign-in last: failed attempts are throttled per client IP after a few (each costs a password hash).
    const logins: Json[] = [{ email: 'fuzz@tenant.example', password: 'not the password' }];
    await run(mutated(logins), 304, 24, async (body) => {
      await check(`POST /portal/api/login ${body.slice(0, 200)}`, () =>
        request(`${tps.url}/portal/api/login`, { method: 'POST', rawBody: body, contentType: 'application/json' }),
      );
    });
    assert.ok(seen.requests >= 2_500, `a few thousand documents (${seen.requests})`);
  });
});
