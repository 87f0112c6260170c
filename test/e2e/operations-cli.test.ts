/**
 * The operator's command line against a running `tps serve`: configuration as code (`tps apply`,
 * `tps export`), `tps backup` / `tps restore`, `tps status`, `tps --version`, JSON errors with
 * --json, and the systemd unit. Front-end IPs 127.0.44.1-3 (no other test uses them).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTps, createTenant, openStoreOf, REPO_ROOT, ACME_DIRECTORY_UNREACHABLE, type Credentials, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freshPostgresDatabase } from '../support/postgres.ts';
import { waitFor } from '../support/wait.ts';
import { TestCa } from '../support/pki.ts';
import { SecretBox, certificateKeyBinding } from '../../src/certs/secret-box.ts';
import { LATEST_MIGRATION } from '../../src/store/migrations.ts';

const TPS_BIN = path.join(REPO_ROOT, 'bin/tps.js');
const FRONTEND = '127.0.44.1,127.0.44.2';
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-operations-cli-'));

interface Run {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs `tps <args>` with exactly these TPS_* variables (none inherited from the test run). */
function tps(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TPS_')));
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [TPS_BIN, ...args],
      { env: { ...inherited, TPS_ACME_DIRECTORY_URL: 'off', TPS_KERNEL_BLOCKING: 'off', ...env } as NodeJS.ProcessEnv },
      (error, stdout, stderr) => {
        resolve({ status: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

/** A --json run: its one JSON object. */
async function tpsJson<T = any>(args: string[], env: Record<string, string | undefined> = {}): Promise<{ status: number; body: T }> {
  const run = await tps([...args, '--json'], env);
  let body: T;
  try {
    body = JSON.parse(run.stdout) as T;
  } catch {
    throw new Error(`tps ${args.join(' ')} --json printed no JSON (exit ${run.status}):\n${run.stdout}\n${run.stderr}`);
  }
  return { status: run.status, body };
}

const clientEnv = (server: Tps, account: Credentials) => ({
  TPS_API_URL: server.url,
  TPS_CLIENT_ID: account.clientId,
  TPS_CLIENT_SECRET: account.clientSecret,
});

describe('tps --version and --json errors', () => {
  it('prints the version of package.json', async () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
    const run = await tps(['--version']);
    assert.equal(run.status, 0);
    assert.equal(run.stdout.trim(), version);
  });

  it("reports every command's failure as one JSON object with --json", async () => {
    const dataDir = path.join(work, 'json-errors');
    const store = { TPS_DATA_DIR: dataDir };
    const client = { TPS_CLIENT_ID: 'id', TPS_CLIENT_SECRET: 'secret', TPS_API_URL: 'http://127.0.0.1:9' };
    const cases: [string[], Record<string, string>, string][] = [
      [['nonsense'], {}, 'USAGE'],
      [['tenant', 'create'], store, 'USAGE'],
      [['service-account', 'create', '--tenant', crypto.randomUUID()], store, 'NOT_FOUND'],
      [['service-account', 'create', '--tenant', crypto.randomUUID(), '--scopes', 'admin'], store, 'INVALID_ARGUMENT'],
      [['user', 'create', '--tenant', crypto.randomUUID(), '--email', 'not-an-email'], store, 'INVALID_ARGUMENT'],
      [['status'], { ...store, TPS_LOCATION: 'frankfurt' }, 'INVALID_SETTING'],
      [['serve'], { ...store, TPS_API_LISTEN: '0.0.0.0:8080' }, 'INVALID_SETTING'],
      [['edge'], { ...store, TPS_LISTENER_PROXY_PROTOCOL: 'always' }, 'INVALID_SETTING'],
      [['backup', path.join(work, 'x.backup')], { TPS_DATA_DIR: path.join(work, 'no-store') }, 'NO_STORE'],
      [['restore', path.join(work, 'no-such.backup')], store, 'NO_BACKUP'],
      [['export'], {}, 'INVALID_SETTING'],
      [['export'], client, 'API_UNREACHABLE'],
      [['apply', '-f', path.join(work, 'missing.yaml')], client, 'FILE_UNREADABLE'],
    ];
    for (const [args, env, code] of cases) {
      const run = await tps([...args, '--json'], env);
      assert.notEqual(run.status, 0, `tps ${args.join(' ')} fails`);
      assert.equal(run.stderr, '', `tps ${args.join(' ')} --json prints nothing on stderr`);
      const body = JSON.parse(run.stdout) as { errors: { code: string; detail: string }[] };
      assert.equal(body.errors[0]?.code, code, `tps ${args.join(' ')}: ${run.stdout}`);
      assert.ok(body.errors[0]!.detail.length > 0);
    }
    // Without --json the same failure is a line on stderr.
    const text = await tps(['restore', path.join(work, 'no-such.backup')], store);
    assert.equal(text.stdout, '');
    assert.match(text.stderr, /^tps: there is no file .*no-such\.backup \(NO_BACKUP\)\n$/);
  });
});

describe('tps apply and tps export', () => {
  let server: Tps;
  let account: Credentials;
  let api: TenantApi;
  let env: Record<string, string>;
  const folder = path.join(work, 'config');

  /** The tenant's state as the API shows it, without what changes by itself. */
  const snapshot = async () => {
    const [configs, certificates, cas] = await Promise.all(
      ['/api/v2/traffic-mgmt/traffic-configs', '/api/v2/traffic-mgmt/certificates', '/api/v2/traffic-mgmt/ca-certificates'].map((url) =>
        api.get(url),
      ),
    );
    return {
      configs: configs!.body.data.map((config: any) => ({ id: config.id, type: config.type, updatedAt: config.attributes.updatedAt })),
      certificates: certificates!.body.data.map((certificate: any) => certificate.id),
      cas: cas!.body.data.map((ca: any) => ca.id),
    };
  };
  const write = (name: string, text: string) => {
    fs.writeFileSync(path.join(folder, name), text);
    return path.join(folder, name);
  };

  let caPem: string;
  let leaf: { certificatePem: string; privateKeyPem: string; fingerprint256: string };

  before(async () => {
    fs.mkdirSync(folder, { recursive: true });
    server = await startTps({
      // The file orders a service-issued certificate: accepted where an ACME service runs (it stays PENDING).
      env: { TPS_FRONTEND_IPS: FRONTEND, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8', TPS_ACME_DIRECTORY_URL: ACME_DIRECTORY_UNREACHABLE },
    });
    account = await createTenant(server);
    api = await TenantApi.connect(server, account);
    env = clientEnv(server, account);
    const ca = await TestCa.create('Partner Root CA');
    caPem = ca.certificatePem;
    leaf = await ca.issue({ commonName: 'www.example.com', dnsNames: ['www.example.com'] });
    fs.writeFileSync(path.join(folder, 'www.pem'), leaf.certificatePem);
    fs.writeFileSync(path.join(folder, 'www.key'), leaf.privateKeyPem);
  });
  after(() => server.stop());

  const indent = (text: string, spaces: number) => text.trim().replace(/^/gm, ' '.repeat(spaces));
  const proxies = (options: { paranoia: number; sshPort: number; withSsh: boolean }) =>
    [
      'caCertificates:',
      '  partners:',
      '    certificates:',
      '      - crlUrl: http://crl.example/partners.crl',
      '        certificate: |',
      indent(caPem, 10),
      'certificates:',
      '  www:',
      '    certificateFile: www.pem',
      '    privateKeyFile: www.key',
      '  api:',
      '    domains: [api.example.com]',
      'trafficConfigs:',
      '  - type: httpProxy',
      '    attributes:',
      '      frontend:',
      '        ipv4: 127.0.44.1',
      '        port: 443',
      '        certificateId: www',
      '        clientCertificateVerification: { mode: VERIFY_AND_REJECT, caCertificateIds: [partners] }',
      '      backend:',
      '        hosts: [{ address: 192.0.2.10, port: 8443 }]',
      '        tlsSettings: { verifyCertificate: { mode: SYSTEM_TRUSTSTORE } }',
      `      waf: { mode: BLOCKING, paranoiaLevel: ${options.paranoia} }`,
      '  - type: httpProxy',
      '    attributes:',
      '      frontend: { ipv4: 127.0.44.1, port: 80 }',
      '      backend: { hosts: [{ address: 192.0.2.10, port: 8080 }] }',
      '      rateLimiting: { thresholds: [{ requests: 100, periodSeconds: 10 }], blockSeconds: 60 }',
      ...(options.withSsh
        ? [
            '  - type: l4Proxy',
            '    attributes:',
            `      frontend: { ipv4: 127.0.44.2, port: ${options.sshPort} }`,
            '      backend: { hosts: [{ address: 192.0.2.11, port: 22 }] }',
            '      protocols: [TCP]',
          ]
        : []),
      '',
    ].join('\n');

  it('plans without changing anything (--dry-run), creates on the first run, changes nothing on the second', async () => {
    const file = write('proxies.yaml', proxies({ paranoia: 1, sshPort: 2222, withSsh: true }));
    const before = await snapshot();
    const dry = await tpsJson(['apply', '-f', file, '--dry-run'], env);
    assert.equal(dry.status, 0, JSON.stringify(dry.body));
    assert.equal(dry.body.dryRun, true);
    assert.deepEqual(dry.body.summary, { create: 6, update: 0, delete: 0, unchanged: 0 });
    assert.deepEqual(await snapshot(), before, 'a dry run changes nothing');

    const text = await tps(['apply', '-f', file, '--dry-run'], env);
    assert.match(text.stdout, /\+ caCertificate partners\n/);
    assert.match(text.stdout, /\+ l4Proxy 127\.0\.44\.2:2222\/TCP\n/);
    assert.match(text.stdout, /dry run: nothing was changed/);

    const applied = await tpsJson(['apply', '-f', file], env);
    assert.equal(applied.status, 0, JSON.stringify(applied.body));
    assert.deepEqual(applied.body.summary, { create: 6, update: 0, delete: 0, unchanged: 0 });
    const configs = (await api.get('/api/v2/traffic-mgmt/traffic-configs')).body.data;
    assert.equal(configs.length, 3);
    const tls = configs.find((config: any) => config.attributes.frontend.port === 443);
    const uploaded = (await api.get('/api/v2/traffic-mgmt/certificates')).body.data.find(
      (certificate: any) => certificate.attributes.source === 'CUSTOMER',
    );
    const [ca] = (await api.get('/api/v2/traffic-mgmt/ca-certificates')).body.data;
    assert.equal(uploaded.attributes.fingerprint, leaf.fingerprint256);
    assert.equal(tls.attributes.frontend.certificateId, uploaded.id, 'the name in the file became the id');
    assert.deepEqual(tls.attributes.frontend.clientCertificateVerification.caCertificateIds, [ca.id]);

    const state = await snapshot();
    const again = await tpsJson(['apply', '-f', file], env);
    assert.equal(again.status, 0);
    assert.deepEqual(again.body.changes, []);
    assert.equal(again.body.summary.unchanged, 6);
    assert.deepEqual(await snapshot(), state, 'a second run changes nothing');
  });

  it('changes, deletes and creates to match an edited file; the dry run prints the plan first', async () => {
    const file = write('proxies.yaml', proxies({ paranoia: 3, sshPort: 2222, withSsh: false }));
    const before = await snapshot();
    const dry = await tps(['apply', '-f', file, '--dry-run'], env);
    assert.equal(dry.status, 0, dry.stderr);
    assert.match(dry.stdout, /~ httpProxy 127\.0\.44\.1:443\/TCP .*\n\s+waf\.paranoiaLevel: 1 -> 3\n/);
    assert.match(dry.stdout, /- l4Proxy 127\.0\.44\.2:2222\/TCP/);
    assert.deepEqual(await snapshot(), before);

    const applied = await tpsJson(['apply', '-f', file], env);
    assert.deepEqual(applied.body.summary, { create: 0, update: 1, delete: 1, unchanged: 4 });
    const configs = (await api.get('/api/v2/traffic-mgmt/traffic-configs')).body.data;
    assert.deepEqual(configs.map((config: any) => config.attributes.frontend.port).sort(), [443, 80]);
    assert.equal(configs.find((config: any) => config.attributes.frontend.port === 443).attributes.waf.paranoiaLevel, 3);
    assert.deepEqual((await tpsJson(['apply', '-f', file], env)).body.changes, []);
  });

  it("shows errors at their line in the file, with the API's pointer, and changes nothing", async () => {
    const before = await snapshot();
    const schema = write(
      'bad.yaml',
      [
        'trafficConfigs:',
        '  - type: l4Proxy',
        '    attributes:',
        '      frontend: { ipv4: 127.0.44.2, port: 70000 }',
        '      backend: { hosts: [{ address: "not a host!", port: 22 }] }',
        '',
      ].join('\n'),
    );
    const refused = await tpsJson(['apply', '-f', schema], env);
    assert.equal(refused.status, 1);
    const port = refused.body.errors.find((error: any) => error.source.path === 'trafficConfigs[0].attributes.frontend.port');
    assert.deepEqual(port.source, {
      pointer: '/data/attributes/frontend/port',
      file: schema,
      line: 4,
      column: 43,
      path: 'trafficConfigs[0].attributes.frontend.port',
    });
    assert.equal(port.code, 'INVALID_VALUE');
    assert.ok(
      refused.body.errors.some(
        (error: any) => error.source.path === 'trafficConfigs[0].attributes.backend.hosts[0].address' && error.source.line === 5,
      ),
    );
    const text = await tps(['apply', '-f', schema], env);
    assert.match(text.stderr, /bad\.yaml:4:43: trafficConfigs\[0\]\.attributes\.frontend\.port: must be <= 65535 \(INVALID_VALUE\)/);

    // The API's own refusal (the key does not belong to the certificate), mapped back to the file.
    fs.writeFileSync(
      path.join(folder, 'other.key'),
      crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }),
    );
    const ca = await TestCa.create('Shop CA');
    const shop = await ca.issue({ commonName: 'shop.example.com', dnsNames: ['shop.example.com'] });
    fs.writeFileSync(path.join(folder, 'shop.pem'), shop.certificatePem);
    const mismatch = write(
      'mismatch.yaml',
      ['certificates:', '  shop:', '    certificateFile: shop.pem', '    privateKeyFile: other.key', ''].join('\n'),
    );
    const answer = await tpsJson(['apply', '-f', mismatch], env);
    assert.equal(answer.status, 1);
    const [keyError] = answer.body.errors;
    assert.equal(keyError.status, '422');
    assert.deepEqual(keyError.source, {
      pointer: '/data/attributes/privateKey',
      file: mismatch,
      line: 4,
      column: 21,
      path: 'certificates.shop.privateKeyFile',
    });
    assert.deepEqual(await snapshot(), before, 'a refused file changes nothing');
  });

  it('exports the tenant in the same format; applying the export changes nothing', async () => {
    const exported = await tps(['export'], env);
    assert.equal(exported.status, 0, exported.stderr);
    assert.match(exported.stdout, /^# tps export of tenant /);
    assert.doesNotMatch(exported.stdout, /PRIVATE KEY/);
    const file = write('export.yaml', exported.stdout);
    const before = await snapshot();
    const applied = await tpsJson(['apply', '-f', file], env);
    assert.equal(applied.status, 0, JSON.stringify(applied.body));
    assert.deepEqual(applied.body.changes, []);
    assert.equal(applied.body.summary.unchanged, 5);
    assert.deepEqual(await snapshot(), before);

    // The JSON form is the same content, and apply reads it too (YAML is a superset of JSON).
    const asJson = await tps(['export', '--json'], env);
    const jsonFile = write('export.json', asJson.stdout);
    assert.deepEqual((await tpsJson(['apply', '-f', jsonFile], env)).body.changes, []);
  });
});

describe('tps backup and tps restore', () => {
  let server: Tps;
  let restored: Tps | undefined;
  let account: Credentials;
  const backupFile = path.join(work, 'backups', 'tps.backup');

  before(async () => {
    server = await startTps({ env: { TPS_FRONTEND_IPS: FRONTEND, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    account = await createTenant(server);
    const ca = await TestCa.create('Backup CA');
    const leaf = await ca.issue({ commonName: 'backup.example.com', dnsNames: ['backup.example.com'] });
    const folder = path.join(work, 'backup-config');
    fs.mkdirSync(folder, { recursive: true });
    fs.writeFileSync(path.join(folder, 'leaf.pem'), leaf.certificatePem);
    fs.writeFileSync(path.join(folder, 'leaf.key'), leaf.privateKeyPem);
    fs.writeFileSync(
      path.join(folder, 'state.yaml'),
      [
        'caCertificates:',
        '  ca:',
        '    certificates:',
        '      - certificate: |',
        ca.certificatePem.trim().replace(/^/gm, '          '),
        'certificates:',
        '  leaf: { certificateFile: leaf.pem, privateKeyFile: leaf.key }',
        'trafficConfigs:',
        '  - type: httpProxy',
        '    attributes:',
        '      frontend: { ipv4: 127.0.44.1, port: 443, certificateId: leaf, clientCertificateVerification: { mode: VERIFY_AND_FORWARD, caCertificateIds: [ca] } }',
        '      backend: { hosts: [{ address: 192.0.2.10, port: 80 }] }',
        '',
      ].join('\n'),
    );
    const applied = await tpsJson(['apply', '-f', path.join(folder, 'state.yaml')], clientEnv(server, account));
    assert.equal(applied.status, 0, JSON.stringify(applied.body));
  });
  after(async () => {
    await restored?.stop();
    await server.stop();
  });

  it('backs up the running store, then restores it into a new data directory with the same resources', async () => {
    const backup = await tpsJson(['backup', backupFile], server.env);
    assert.equal(backup.status, 0, JSON.stringify(backup.body));
    assert.equal(backup.body.schemaVersion, LATEST_MIGRATION);
    assert.equal(backup.body.masterKey.source, 'file');
    assert.match(backup.body.masterKey.note, /does not hold the master key/);

    // The live store is not overwritten.
    const refused = await tpsJson(['restore', backupFile], server.env);
    assert.equal(refused.body.errors[0].code, 'STORE_IN_USE');

    const dataDir = path.join(work, 'restored');
    const withoutKey = await tpsJson(['restore', backupFile], { TPS_DATA_DIR: dataDir });
    assert.equal(withoutKey.body.errors[0].code, 'MASTER_KEY_MISSING');
    fs.mkdirSync(dataDir, { recursive: true });
    fs.copyFileSync(path.join(server.env.TPS_DATA_DIR!, 'master.key'), path.join(dataDir, 'master.key'));
    const restore = await tpsJson(['restore', backupFile], { TPS_DATA_DIR: dataDir });
    assert.equal(restore.status, 0, JSON.stringify(restore.body));
    assert.equal(restore.body.counts.trafficConfigs, 1);
    assert.equal(restore.body.privateKeysChecked, 2, 'the token signing key and the certificate key open');

    restored = await startTps({ env: { TPS_FRONTEND_IPS: FRONTEND, TPS_DATA_DIR: dataDir, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    // The same tenants and service accounts: the old credentials get a token from the restored service.
    assert.deepEqual(await restored.cli('tenant', 'list'), await server.cli('tenant', 'list'));
    assert.deepEqual(
      await restored.cli('service-account', 'list', '--tenant', account.tenantId),
      await server.cli('service-account', 'list', '--tenant', account.tenantId),
    );
    const original = await TenantApi.connect(server, account);
    const copy = await TenantApi.connect(restored, account);
    for (const url of [
      '/api/v2/traffic-mgmt/traffic-configs',
      '/api/v2/traffic-mgmt/certificates',
      '/api/v2/traffic-mgmt/ca-certificates',
    ]) {
      const strip = (data: any[]) =>
        data.map(({ attributes: { status: _status, statusDetail: _detail, ...attributes }, ...resource }: any) => ({
          ...resource,
          attributes,
        }));
      assert.deepEqual(strip((await copy.get(url)).body.data), strip((await original.get(url)).body.data), url);
    }
    // The certificate's private key still opens with the master key.
    const store = await openStoreOf(restored);
    try {
      const row = await store.db.one<{ id: string; tenant_id: string; private_key: string }>(
        'SELECT id, tenant_id, private_key FROM certificates WHERE private_key IS NOT NULL',
      );
      const binding = certificateKeyBinding({ id: row!.id, tenantId: row!.tenant_id });
      assert.match(SecretBox.fromSettings({ masterKey: undefined, dataDir }).open(row!.private_key, binding), /BEGIN PRIVATE KEY/);
    } finally {
      await store.close();
    }
  });

  it('says to use pg_dump for a PostgreSQL store, with its schema version', async () => {
    const databaseUrl = await freshPostgresDatabase();
    assert.equal((await tps(['tenant', 'list'], { TPS_DATABASE_URL: databaseUrl })).status, 0, 'the store is migrated');
    const answer = await tpsJson(['backup', path.join(work, 'pg.backup')], { TPS_DATABASE_URL: databaseUrl });
    assert.equal(answer.status, 1);
    const [error] = answer.body.errors;
    assert.equal(error.code, 'USE_PG_DUMP');
    assert.equal(error.meta.schemaVersion, LATEST_MIGRATION);
    assert.match(error.meta.command, /^pg_dump --format=custom /);
    assert.doesNotMatch(error.detail, /:[^:@/]+@/, 'no password in the advice');
    assert.equal(fs.existsSync(path.join(work, 'pg.backup')), false);
  });
});

describe('tps status', () => {
  let server: Tps;

  before(async () => {
    server = await startTps({
      env: { TPS_EDGE: 'true', TPS_EDGE_WORKERS: '1', TPS_FRONTEND_IPS: '127.0.44.3', TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' },
    });
  });
  after(() => server.stop());

  it('lists the edge nodes, the configurations by status and how far each node is behind', async () => {
    const account = await createTenant(server);
    const file = path.join(work, 'status.yaml');
    fs.writeFileSync(
      file,
      'trafficConfigs:\n  - type: l4Proxy\n    attributes:\n      frontend: { ipv4: 127.0.44.3, port: 24022 }\n      backend: { hosts: [{ address: 192.0.2.1, port: 22 }] }\n',
    );
    assert.equal((await tpsJson(['apply', '-f', file], clientEnv(server, account))).status, 0);
    const status = await waitFor('the proxy to be ACTIVE in tps status', async () => {
      const { body } = await tpsJson(['status'], server.env);
      return body.configurations.byStatus.ACTIVE === 1 && body;
    });
    assert.equal(status.store.kind, 'sqlite');
    assert.equal(status.store.schemaVersion, LATEST_MIGRATION);
    assert.equal(status.nodes.length, 1);
    assert.equal(status.nodes[0].live, true);
    assert.equal(status.nodes[0].behind, 0);
    assert.equal(status.nodes[0].lagSeconds, 0);
    assert.deepEqual(status.configurations.notActive, []);
    const text = await tps(['status'], server.env);
    assert.match(text.stdout, /edge nodes {6}1 live\n/);
    assert.match(text.stdout, /configurations {2}1: 1 active, 0 provisioning, 0 in error/);
  });
});

describe('the API behind a reverse proxy (TLS for the API)', () => {
  let behindProxy: Tps;
  let direct: Tps;

  before(async () => {
    [behindProxy, direct] = await Promise.all([startTps({ env: { TPS_API_TRUSTED_PROXIES: '127.0.0.1' } }), startTps()]);
  });
  after(async () => {
    await behindProxy.stop();
    await direct.stop();
  });

  /** Failed portal sign-ins for one user from one X-Forwarded-For address, until the throttle answers 429. */
  const signIn = (server: Tps, email: string, forwardedFor: string) =>
    fetch(`${server.url}/portal/api/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': forwardedFor },
      body: JSON.stringify({ email, password: 'wrong password!' }),
    }).then((response) => response.status);

  it("takes the client from X-Forwarded-For of TPS_API_TRUSTED_PROXIES only: one client's failures throttle that client", async () => {
    for (const server of [behindProxy, direct]) {
      const tenant = await server.cli<{ id: string }>('tenant', 'create', '--name', 'proxied');
      const user = await server.cli<{ email: string }>('user', 'create', '--tenant', tenant.id, '--email', 'ops@example.com');
      const statuses: number[] = [];
      for (let attempt = 0; attempt < 6; attempt++) statuses.push(await signIn(server, user.email, '198.51.100.1'));
      assert.equal(statuses.at(-1), 429, `${statuses}`);
      // Another client behind the same reverse proxy.
      assert.equal(await signIn(server, user.email, '198.51.100.2'), server === behindProxy ? 401 : 429);
    }
  });
});

describe('contrib/systemd/tps.service', () => {
  const analyze = ['/usr/bin/systemd-analyze', '/bin/systemd-analyze'].find((candidate) => fs.existsSync(candidate));

  it('passes systemd-analyze verify', {
    skip: analyze === undefined && 'systemd-analyze is not installed (Debian package systemd; scripts/setup.sh --tests installs it)',
  }, async () => {
    // A root folder with the unit where it is installed, the program it starts, and systemd's own
    // units: verify then checks the unit as it would load on the installed machine.
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-unit-'));
    fs.mkdirSync(path.join(root, 'etc/systemd/system'), { recursive: true });
    fs.mkdirSync(path.join(root, 'opt/tps/bin'), { recursive: true });
    fs.mkdirSync(path.join(root, 'usr/lib/systemd'), { recursive: true });
    fs.cpSync('/usr/lib/systemd/system', path.join(root, 'usr/lib/systemd/system'), { recursive: true });
    fs.copyFileSync(path.join(REPO_ROOT, 'contrib/systemd/tps.service'), path.join(root, 'etc/systemd/system/tps.service'));
    fs.copyFileSync(TPS_BIN, path.join(root, 'opt/tps/bin/tps.js'));
    fs.chmodSync(path.join(root, 'opt/tps/bin/tps.js'), 0o755);
    const result = await new Promise<Run>((resolve) => {
      execFile(analyze!, ['verify', `--root=${root}`, '/etc/systemd/system/tps.service'], (error, stdout, stderr) =>
        resolve({ status: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
    fs.rmSync(root, { recursive: true, force: true });
    assert.equal(result.status, 0, result.stderr);
    // Unknown or mistyped settings are only warnings: none may be printed.
    assert.equal(result.stderr.trim(), '', result.stderr);
  });

  it('grants low ports and kernel blocking (nftables) their capabilities, and no other', () => {
    const unit = fs.readFileSync(path.join(REPO_ROOT, 'contrib/systemd/tps.service'), 'utf8');
    assert.match(unit, /^AmbientCapabilities=CAP_NET_ADMIN CAP_NET_BIND_SERVICE$/m);
    assert.match(unit, /^CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_BIND_SERVICE$/m);
    assert.match(unit, /^RestrictAddressFamilies=.*\bAF_NETLINK\b/m, 'nft talks to the kernel over netlink');
  });
});

after(() => fs.rmSync(work, { recursive: true, force: true }));
