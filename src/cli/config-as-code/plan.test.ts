/**
 * The plan of `tps apply` (plan.ts): how file entries are matched to existing resources, what
 * changes, in which order, and that an export applied again changes nothing (property test over
 * random tenant states).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { planChanges } from './plan.ts';
import { parseConfigFile } from './file.ts';
import { exportState, exportYaml } from './export.ts';
import { validateBody } from '../../api/schemas/validator.ts';
import { TrafficConfigDocument, type ProxyType } from '@tps/model';
import { TestCa } from '../../../test/support/pki.ts';
import type { CurrentCaCertificate, CurrentCertificate, CurrentState, CurrentTrafficConfig, DesiredState } from './types.ts';

const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-plan-'));
const caPems = await Promise.all(['Partner CA', 'Staff CA', 'Origin CA'].map(async (name) => (await TestCa.create(name)).certificatePem));
const FRONTEND_IPS = ['127.0.0.2', '127.0.0.3', '::1'];

/** A configuration as the API answers it: the attributes with defaults, plus the read-only ones. */
function stored(type: ProxyType, attributes: Record<string, unknown>, id: string = crypto.randomUUID()): CurrentTrafficConfig {
  const document = validateBody(TrafficConfigDocument, { data: { type, attributes: structuredClone(attributes) } });
  return {
    id,
    type,
    attributes: {
      ...document.data.attributes,
      status: 'ACTIVE',
      statusDetail: null,
      createdAt: '2026-01-01T00:00:00.000Z',
      updatedAt: '2026-01-01T00:00:00.000Z',
    },
  };
}

function caOf(pem: string, crlUrl?: string, id: string = crypto.randomUUID()): CurrentCaCertificate {
  const certificate = new crypto.X509Certificate(pem);
  return {
    id,
    attributes: {
      certificates: [
        {
          certificate: pem,
          ...(crlUrl && { crlUrl }),
          subject: certificate.subject,
          fingerprint: certificate.fingerprint256,
          notAfter: certificate.validTo,
        },
      ],
    },
  };
}

function customerCertificate(fingerprint: string, id: string = crypto.randomUUID()): CurrentCertificate {
  return {
    id,
    attributes: { source: 'CUSTOMER', status: 'ISSUED', domains: ['www.example.com'], subject: 'CN=www.example.com', fingerprint },
  };
}

function state(parts: Partial<CurrentState>): CurrentState {
  return {
    tenantId: crypto.randomUUID(),
    caCertificates: [],
    certificates: [],
    trafficConfigs: [],
    frontendIps: FRONTEND_IPS,
    assignedBindings: [],
    ...parts,
  };
}

const l4 = (port: number, extra: Record<string, unknown> = {}) => ({
  frontend: { ipv4: '127.0.0.2', port },
  backend: { hosts: [{ address: '192.0.2.10', port: 22 }] },
  ...extra,
});
const http = (port: number, extra: Record<string, unknown> = {}) => ({
  frontend: { ipv4: '127.0.0.3', port },
  backend: { hosts: [{ address: '192.0.2.20', port: 80 }] },
  ...extra,
});

const desired = (
  configs: { type: ProxyType; id?: string; attributes: Record<string, unknown> }[],
  rest: Omit<DesiredState, 'trafficConfigs'> = {},
): DesiredState => ({
  ...rest,
  trafficConfigs: configs.map((config, index) => ({ index, ...config })),
});

const summary = (plan: ReturnType<typeof planChanges>) => plan.changes.map((change) => `${change.action} ${change.kind}`);

describe('apply plan: proxies', () => {
  it('creates what is missing, deletes what the file does not have, leaves equal ones alone', () => {
    const kept = stored('l4Proxy', l4(2222));
    const gone = stored('l4Proxy', l4(3333));
    const plan = planChanges(
      desired([
        { type: 'l4Proxy', attributes: l4(2222) },
        { type: 'httpProxy', attributes: http(80) },
      ]),
      state({ trafficConfigs: [kept, gone] }),
    );
    assert.deepEqual(plan.problems, []);
    assert.deepEqual(summary(plan), ['delete trafficConfig', 'create trafficConfig']);
    assert.equal(plan.unchanged, 1);
    const deletion = plan.changes[0]!;
    assert.equal(deletion.action === 'delete' && deletion.id, gone.id);
  });

  it('matches an entry without id by its front-end binding and replaces what differs, defaults and nulls aside', () => {
    const existing = stored('httpProxy', http(80, { waf: { mode: 'LOGGING' } }));
    const same = planChanges(
      desired([{ type: 'httpProxy', attributes: http(80, { waf: { mode: 'LOGGING', paranoiaLevel: 1 }, rateLimiting: null }) }]),
      state({ trafficConfigs: [existing] }),
    );
    assert.deepEqual(summary(same), []);
    const changed = planChanges(
      desired([{ type: 'httpProxy', attributes: http(80, { waf: { mode: 'BLOCKING', paranoiaLevel: 3 } }) }]),
      state({ trafficConfigs: [existing] }),
    );
    assert.deepEqual(summary(changed), ['update trafficConfig']);
    const update = changed.changes[0]!;
    assert.ok(update.action === 'update' && update.id === existing.id);
    assert.deepEqual(update.action === 'update' && update.changes, [
      { path: 'waf.mode', from: 'LOGGING', to: 'BLOCKING' },
      { path: 'waf.paranoiaLevel', from: 1, to: 3 },
    ]);
  });

  it('changes a port in place when the entry carries the id; without it the proxy is made anew', () => {
    const existing = stored('l4Proxy', l4(2222));
    const byId = planChanges(desired([{ type: 'l4Proxy', id: existing.id, attributes: l4(2223) }]), state({ trafficConfigs: [existing] }));
    assert.deepEqual(summary(byId), ['update trafficConfig']);
    const byBinding = planChanges(desired([{ type: 'l4Proxy', attributes: l4(2223) }]), state({ trafficConfigs: [existing] }));
    assert.deepEqual(summary(byBinding), ['delete trafficConfig', 'create trafficConfig']);
  });

  it('deletes and creates a proxy whose type changes on the same binding (the API cannot change a type)', () => {
    const existing = stored('l4Proxy', { ...l4(8080), frontend: { ipv4: '127.0.0.3', port: 8080 } });
    const plan = planChanges(desired([{ type: 'httpProxy', attributes: http(8080) }]), state({ trafficConfigs: [existing] }));
    assert.deepEqual(summary(plan), ['delete trafficConfig', 'create trafficConfig']);
  });

  it('finds clashes before any change: inside the file, with other accounts, foreign front-end IPs, the API schema', () => {
    const plan = planChanges(
      desired([
        { type: 'l4Proxy', attributes: l4(2222) },
        { type: 'l4Proxy', attributes: l4(2222) },
        { type: 'l4Proxy', attributes: l4(4444) },
        { type: 'l4Proxy', attributes: { ...l4(5555), frontend: { ipv4: '10.1.1.1', port: 5555 } } },
        { type: 'httpProxy', attributes: http(80, { waf: { mode: 'BLOK' } }) },
      ]),
      state({ assignedBindings: ['127.0.0.2:4444/TCP'] }),
    );
    assert.deepEqual(
      plan.problems.map((problem) => [problem.code, problem.path.join('.')]),
      [
        ['PORT_IN_USE', 'trafficConfigs.1.attributes.frontend.port'],
        ['PORT_IN_USE', 'trafficConfigs.2.attributes.frontend.port'],
        ['UNKNOWN_FRONTEND_IP', 'trafficConfigs.3.attributes.frontend.ipv4'],
        ['INVALID_VALUE', 'trafficConfigs.4.attributes.waf.mode'],
      ],
    );
  });

  it('leaves a kind alone when the file has no section for it', () => {
    const certificate = customerCertificate(`${'AB:'.repeat(31)}AB`);
    const plan = planChanges({ trafficConfigs: [] }, state({ certificates: [certificate], trafficConfigs: [stored('l4Proxy', l4(1))] }));
    assert.deepEqual(summary(plan), ['delete trafficConfig']);
    assert.deepEqual(summary(planChanges({}, state({ trafficConfigs: [stored('l4Proxy', l4(1))] }))), []);
  });
});

describe('apply plan: certificates and references', () => {
  it('creates certificates and CA certificates before the proxies that name them, and deletes replaced ones last', () => {
    const oldCa = caOf(caPems[0]!, 'http://crl.example/old.crl');
    const config = stored(
      'httpProxy',
      http(443, {
        frontend: {
          ipv4: '127.0.0.3',
          port: 443,
          clientCertificateVerification: { mode: 'VERIFY_AND_REJECT', caCertificateIds: [oldCa.id] },
        },
      }),
    );
    const file = parseConfigFile(
      'f.yaml',
      [
        'caCertificates:',
        '  partners:',
        `    id: ${oldCa.id}`,
        '    certificates:',
        '      - crlUrl: http://crl.example/new.crl',
        '        certificate: |',
        caPems[0]!.trim().replace(/^/gm, '          '),
        'certificates:',
        '  api: { domains: [api.example.com] }',
        'trafficConfigs:',
        '  - type: httpProxy',
        '    attributes:',
        '      frontend: { ipv4: 127.0.0.3, port: 443, certificateId: api, clientCertificateVerification: { mode: VERIFY_AND_REJECT, caCertificateIds: [partners] } }',
        '      backend: { hosts: [{ address: 192.0.2.20, port: 80 }] }',
      ].join('\n'),
      folder,
    );
    assert.deepEqual(file.problems, []);
    const plan = planChanges(file.state!, state({ caCertificates: [oldCa], trafficConfigs: [config] }));
    assert.deepEqual(plan.problems, []);
    assert.deepEqual(summary(plan), ['create caCertificate', 'create certificate', 'update trafficConfig', 'delete caCertificate']);
    const update = plan.changes[2]!;
    assert.ok(update.action === 'update');
    const frontend = update.attributes.frontend as Record<string, unknown>;
    assert.deepEqual(frontend.certificateId, { pending: 'certificate', key: 'api' });
    assert.deepEqual((frontend.clientCertificateVerification as Record<string, unknown>).caCertificateIds, [
      { pending: 'caCertificate', key: 'partners' },
    ]);
  });

  it('matches an uploaded certificate by fingerprint and a service-issued one by its names, preferring an issued one', () => {
    const fingerprint = Array(32).fill('0A').join(':');
    const uploaded = customerCertificate(fingerprint);
    const failed: CurrentCertificate = {
      id: crypto.randomUUID(),
      attributes: { source: 'ACME', status: 'FAILED', domains: ['a.example'] },
    };
    const issued: CurrentCertificate = {
      id: crypto.randomUUID(),
      attributes: { source: 'ACME', status: 'ISSUED', domains: ['a.example'] },
    };
    const plan = planChanges(
      {
        certificates: [
          { key: 'www', fingerprint },
          { key: 'a', domains: ['a.example'] },
        ],
      },
      state({ certificates: [uploaded, failed, issued] }),
    );
    assert.deepEqual(
      plan.changes.map((change) => change.action === 'delete' && change.id),
      [failed.id],
    );
    assert.equal(plan.unchanged, 2);
  });

  it('says when an uploaded certificate named by fingerprint does not exist, and when a reference names nothing', () => {
    const fingerprint = Array(32).fill('0B').join(':');
    const plan = planChanges(
      desired([{ type: 'httpProxy', attributes: http(443, { frontend: { ipv4: '127.0.0.3', port: 443, certificateId: 'shop' } }) }], {
        certificates: [{ key: 'www', fingerprint }],
      }),
      state({}),
    );
    assert.deepEqual(
      plan.problems.map((problem) => problem.code),
      ['CERTIFICATE_NOT_FOUND', 'UNKNOWN_REFERENCE'],
    );
  });

  it('refuses an id reference to a certificate the file would delete', () => {
    const certificate = customerCertificate(Array(32).fill('0C').join(':'));
    const plan = planChanges(
      desired(
        [{ type: 'httpProxy', attributes: http(443, { frontend: { ipv4: '127.0.0.3', port: 443, certificateId: certificate.id } }) }],
        { certificates: [] },
      ),
      state({ certificates: [certificate] }),
    );
    assert.deepEqual(
      plan.problems.map((problem) => problem.code),
      ['REFERENCE_NOT_IN_FILE'],
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Export, then apply: nothing changes.

const port = fc.integer({ min: 1, max: 65535 });
const hosts = fc.array(fc.record({ address: fc.integer({ min: 1, max: 254 }).map((n) => `192.0.2.${n}`), port }), {
  minLength: 1,
  maxLength: 3,
});
const frontendIp = fc.constantFrom(...FRONTEND_IPS).map((ip) => (ip.includes(':') ? { ipv6: ip } : { ipv4: ip }));

const l4Attributes = fc.record(
  {
    frontend: fc.tuple(frontendIp, port).map(([ip, number]) => ({ ...ip, port: number })),
    backend: fc.record(
      { hosts, deliveryMethod: fc.constantFrom('LEAST_CONNECTIONS', 'ROUND_ROBIN', 'SOURCE_IP_HASH') },
      { requiredKeys: ['hosts'] },
    ),
    protocols: fc.subarray(['TCP', 'UDP'], { minLength: 1 }),
    proxyProtocol: fc.record({ enabled: fc.boolean(), version: fc.constantFrom(1, 2) }),
  },
  { requiredKeys: ['frontend', 'backend'] },
);

const httpAttributes = fc.record(
  {
    frontend: fc.tuple(frontendIp, port, fc.boolean(), fc.boolean()).map(([ip, number, tls, mtls]) => ({ ...ip, port: number, tls, mtls })),
    backend: fc.record({ hosts }),
    waf: fc.record({ mode: fc.constantFrom('BLOCKING', 'LOGGING'), paranoiaLevel: fc.integer({ min: 1, max: 4 }) }, { requiredKeys: [] }),
    rateLimiting: fc.option(
      fc.record({
        thresholds: fc.array(fc.record({ requests: fc.integer({ min: 1, max: 1000 }), periodSeconds: fc.integer({ min: 1, max: 3600 }) }), {
          minLength: 1,
          maxLength: 3,
        }),
        blockSeconds: fc.integer({ min: 1, max: 600 }),
      }),
      { nil: undefined },
    ),
    geoFencing: fc.option(
      fc.record({
        mode: fc.constantFrom('BLOCK_LISTED', 'ALLOW_LISTED'),
        countries: fc.subarray(['DE', 'FR', 'US', 'GB'], { minLength: 1 }),
      }),
      { nil: undefined },
    ),
  },
  { requiredKeys: ['frontend', 'backend'] },
);

const tenantState = fc
  .record({
    cas: fc.array(
      fc.tuple(fc.integer({ min: 0, max: caPems.length - 1 }), fc.option(fc.constant('http://crl.example/ca.crl'), { nil: undefined })),
      { maxLength: 4 },
    ),
    uploaded: fc.array(fc.uint8Array({ minLength: 32, maxLength: 32 }), { maxLength: 3 }),
    issued: fc.uniqueArray(fc.constantFrom('a.example', 'b.example', 'c.example'), { maxLength: 3 }),
    configs: fc.array(
      fc.oneof(
        l4Attributes.map((attributes) => ({ type: 'l4Proxy' as const, attributes })),
        httpAttributes.map((attributes) => ({ type: 'httpProxy' as const, attributes })),
      ),
      { maxLength: 8 },
    ),
    pick: fc.array(fc.nat(), { minLength: 8, maxLength: 8 }),
  })
  .map(({ cas, uploaded, issued, configs, pick }) => {
    const caCertificates = cas.map(([index, crl]) => caOf(caPems[index]!, crl));
    const certificates: CurrentCertificate[] = [
      ...uploaded.map((bytes) => customerCertificate(Buffer.from(bytes).toString('hex').toUpperCase().match(/../g)!.join(':'))),
      ...issued.map(
        (domain): CurrentCertificate => ({ id: crypto.randomUUID(), attributes: { source: 'ACME', status: 'ISSUED', domains: [domain] } }),
      ),
    ];
    const taken = new Set<string>();
    const trafficConfigs: CurrentTrafficConfig[] = [];
    for (const [n, config] of configs.entries()) {
      const attributes = structuredClone(config.attributes) as Record<string, unknown> & { frontend: Record<string, unknown> };
      const { tls, mtls, ...frontend } = attributes.frontend as Record<string, unknown> & { tls?: boolean; mtls?: boolean };
      attributes.frontend = frontend;
      if (config.type === 'httpProxy' && tls && certificates.length > 0) {
        frontend.certificateId = certificates[pick[n]! % certificates.length]!.id;
        if (mtls && caCertificates.length > 0)
          frontend.clientCertificateVerification = {
            mode: 'VERIFY_AND_REJECT',
            caCertificateIds: [caCertificates[pick[n]! % caCertificates.length]!.id],
          };
      }
      const ip = (frontend.ipv4 ?? frontend.ipv6) as string;
      const protocols = config.type === 'l4Proxy' ? ((attributes.protocols as string[] | undefined) ?? ['TCP']) : ['TCP'];
      const bindings = protocols.map((protocol) => `${ip}:${String(frontend.port)}/${protocol}`);
      if (bindings.some((binding) => taken.has(binding))) continue;
      for (const binding of bindings) taken.add(binding);
      trafficConfigs.push(stored(config.type, attributes));
    }
    return state({ caCertificates, certificates, trafficConfigs });
  });

const exportedFile = (current: CurrentState, withIds: boolean) => {
  const exported = exportState(current);
  if (!withIds) {
    for (const section of [exported.caCertificates, exported.certificates] as Record<string, { id?: string }>[])
      for (const entry of Object.values(section)) delete entry.id;
    for (const config of exported.trafficConfigs as { id?: string }[]) delete config.id;
  }
  const file = parseConfigFile('export.yaml', exportYaml(current, exported), folder);
  assert.deepEqual(file.problems, []);
  return file.state!;
};

describe('apply plan: an export applied again', () => {
  it('changes nothing, for any tenant state', () => {
    fc.assert(
      fc.property(tenantState, (current) => {
        const plan = planChanges(exportedFile(current, true), current);
        assert.deepEqual(plan.problems, []);
        assert.deepEqual(plan.changes, []);
        assert.equal(plan.unchanged, current.caCertificates.length + current.certificates.length + current.trafficConfigs.length);
      }),
      { numRuns: 60 },
    );
  });

  it('changes nothing without its ids either: entries are then matched by content', () => {
    fc.assert(
      fc.property(tenantState, (current) => {
        const plan = planChanges(exportedFile(current, false), current);
        assert.deepEqual(plan.problems, []);
        assert.deepEqual(plan.changes, []);
      }),
      { numRuns: 60 },
    );
  });
});
