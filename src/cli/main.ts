/**
 * The `tps` command for operators and scripts. Every command takes --json and then prints exactly
 * one JSON object on stdout, errors included (`{"errors": [...]}`, src/cli/output.ts).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import {
  loadApiClientSettings,
  loadSettings,
  SettingsError,
  API_CLIENT_ENV,
  SETTINGS_ENV,
  type SettingsInput,
} from '../config/settings.ts';
import { openStore, type Store } from '../store/index.ts';
import { sqliteFile } from '../store/db.ts';
import { SCOPES, type Scope } from '../store/service-accounts.ts';
import { MIN_PASSWORD_LENGTH } from '../store/portal-users.ts';
import { ConflictError } from '../store/errors.ts';
import { serve, runEdgeNode } from './serve.ts';
import { CliError, EXIT_FAILED, EXIT_USAGE, jsonRequested, printResult as print, reportFailure } from './output.ts';
import { backupStore, restoreStore } from './backup.ts';
import { describeStatus, storeStatus } from './status.ts';
import { applyFile, describeReport } from './config-as-code/apply.ts';
import { ApiSession } from './config-as-code/api-client.ts';
import { exportState, exportYaml } from './config-as-code/export.ts';

const { version } = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
const json = jsonRequested();

const program = new Command('tps')
  .description('Self-hosted traffic protection service: proxies with WAF, rate limiting, geo fencing and TLS.')
  .version(version, '-V, --version', 'print the version')
  // Set before the commands are added, so that every command inherits them: the parser's errors
  // are reported by reportFailure below (as JSON with --json), not printed by commander itself.
  .exitOverride()
  .configureOutput({ outputError: (text, write) => (json ? undefined : write(text)) })
  .showHelpAfterError(!json)
  .configureHelp({ sortSubcommands: true });

/** Flags every command accepts: where the store is. */
const storeOptions = (command: Command) =>
  command
    .addOption(new Option('--data-dir <dir>', `folder of the SQLite store (${SETTINGS_ENV.dataDir})`))
    .addOption(new Option('--database-url <url>', `postgres://... instead of SQLite (${SETTINGS_ENV.databaseUrl})`));

/** Flags of the edge's client address (serve and edge): which load balancers are trusted, and how. */
const clientAddressOptions = (command: Command) =>
  command
    .addOption(
      new Option(
        '--metrics-listen <host:port>',
        `operators' listener of /metrics and /healthz (${SETTINGS_ENV.metricsListen}, default 127.0.0.1:9464)`,
      ),
    )
    .addOption(
      new Option(
        '--trusted-proxies <list>',
        `comma list of CIDRs of load balancers whose PROXY headers and X-Forwarded-For are trusted (${SETTINGS_ENV.trustedProxies})`,
      ),
    )
    .addOption(
      new Option(
        '--listener-proxy-protocol <mode>',
        `off, optional or required: PROXY protocol headers from trusted peers (${SETTINGS_ENV.listenerProxyProtocol}, default off)`,
      ),
    );

const settingsFrom = (options: Record<string, string | boolean | undefined>) => loadSettings(options as SettingsInput);

async function withStore<T>(options: Record<string, string | boolean | undefined>, work: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(settingsFrom(options));
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

/** A wrong call: bad flags or values. */
function fail(message: string): never {
  throw new CliError('INVALID_ARGUMENT', message, { exitCode: EXIT_USAGE });
}

storeOptions(
  clientAddressOptions(
    program
      .command('serve')
      .description('run the API, token issuer and edge')
      .option('--demo', 'seed a demo tenant and print a client id, secret and a ready curl line')
      .option('--json', 'report a failure to start as JSON (logs are JSON lines already)')
      .addOption(new Option('--api-listen <host:port>', `API listener (${SETTINGS_ENV.apiListen}, default 127.0.0.1:8080)`))
      .addOption(new Option('--base-url <url>', `the service's base address (${SETTINGS_ENV.baseUrl})`))
      .addOption(new Option('--auth-url <url>', `the token issuer's address (${SETTINGS_ENV.authUrl})`))
      .addOption(
        new Option(
          '--api-trusted-proxies <list>',
          `comma list of CIDRs of reverse proxies in front of the API whose X-Forwarded-For is trusted (${SETTINGS_ENV.apiTrustedProxies})`,
        ),
      )
      .addOption(new Option('--frontend-ips <list>', `comma list of front-end IPs offered to tenants (${SETTINGS_ENV.frontendIps})`))
      .addOption(new Option('--location <code>', `three-letter edge location code (${SETTINGS_ENV.location})`)),
  ),
).action(async (options: Record<string, string | boolean | undefined>) => {
  const { demo, json: _json, ...flags } = options;
  const service = await serve(settingsFrom(flags), { demo: demo === true });
  const stop = () => {
    void service.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
});

storeOptions(
  clientAddressOptions(
    program
      .command('edge')
      .description('run an edge node only: the proxies of every configuration in the shared store')
      .option('--json', 'report a failure to start as JSON (logs are JSON lines already)')
      .addOption(new Option('--location <code>', `three-letter edge location code (${SETTINGS_ENV.location})`)),
  ),
).action(async (options: Record<string, string | boolean | undefined>) => {
  const node = await runEdgeNode(settingsFrom(options));
  const stop = () => {
    void node.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
});

const tenant = program.command('tenant').description('tenants (customers)');
storeOptions(tenant.command('create').description('create a tenant').requiredOption('--name <name>').option('--json')).action(
  async (options: { name: string; json?: boolean }) => {
    const created = await withStore(options, (store) => store.tenants.create(options.name));
    print(options.json, { id: created.id, name: created.name }, created.id);
  },
);
storeOptions(tenant.command('list').description('list tenants').option('--json')).action(async (options: { json?: boolean }) => {
  const tenants = await withStore(options, (store) => store.tenants.list());
  print(options.json, { data: tenants }, tenants.map((t) => `${t.id}  ${t.name}`).join('\n'));
});

const serviceAccount = program.command('service-account').description('API-only users of a tenant');
storeOptions(
  serviceAccount
    .command('create')
    .description('create a service account; its secret is printed this once')
    .requiredOption('--tenant <id>')
    .option('--scopes <list>', 'comma list of read, write, insight', 'read,write,insight')
    .option('--name <name>', 'a label', 'service account')
    .option('--json'),
).action(async (options: { tenant: string; scopes: string; name: string; json?: boolean }) => {
  const scopes = options.scopes
    .split(',')
    .map((scope) => scope.trim())
    .filter(Boolean);
  const unknown = scopes.filter((scope) => !(SCOPES as readonly string[]).includes(scope));
  if (unknown.length > 0 || scopes.length === 0) fail(`--scopes must list some of ${SCOPES.join(', ')}; got "${options.scopes}"`);
  const account = await withStore(options, async (store) => {
    if (!(await store.tenants.get(options.tenant))) throw new CliError('NOT_FOUND', `no tenant ${options.tenant}`);
    return store.serviceAccounts.create(options.tenant, options.name, scopes as Scope[]);
  });
  print(
    options.json,
    { clientId: account.clientId, clientSecret: account.clientSecret, tenantId: account.tenantId, scopes: account.scopes },
    `client id      ${account.clientId}\nclient secret  ${account.clientSecret}   (shown once)`,
  );
});
storeOptions(
  serviceAccount.command('list').description("list a tenant's service accounts").requiredOption('--tenant <id>').option('--json'),
).action(async (options: { tenant: string; json?: boolean }) => {
  const accounts = await withStore(options, (store) => store.serviceAccounts.list(options.tenant));
  print(
    options.json,
    { data: accounts },
    accounts.map((a) => `${a.clientId}  ${a.scopes.join(',')}  ${a.revokedAt ? `revoked ${a.revokedAt}` : 'active'}  ${a.name}`).join('\n'),
  );
});
storeOptions(
  serviceAccount
    .command('revoke')
    .description('revoke a service account: its secret and all its tokens stop working')
    .requiredOption('--client-id <id>')
    .option('--json'),
).action(async (options: { clientId: string; json?: boolean }) => {
  const account = await withStore(options, (store) => store.serviceAccounts.revoke(undefined, options.clientId));
  if (!account) throw new CliError('NOT_FOUND', `no service account ${options.clientId}`);
  print(options.json, { clientId: account.clientId, revokedAt: account.revokedAt }, `revoked ${account.clientId}`);
});

const user = program.command('user').description('people who sign in to the portal (one tenant each)');
storeOptions(
  user
    .command('create')
    .description('create a portal user; without --password one is generated and printed this once')
    .requiredOption('--tenant <id>')
    .requiredOption('--email <email>')
    .option('--password <password>', `at least ${MIN_PASSWORD_LENGTH} characters (visible in the shell history: prefer the generated one)`)
    .option('--json'),
).action(async (options: { tenant: string; email: string; password?: string; json?: boolean }) => {
  if (!/^[^\s@]+@[^\s@]+$/.test(options.email.trim())) fail(`--email must be an email address; got "${options.email}"`);
  if (options.password !== undefined && options.password.length < MIN_PASSWORD_LENGTH) {
    fail(`--password must have at least ${MIN_PASSWORD_LENGTH} characters`);
  }
  const password = options.password ?? crypto.randomBytes(15).toString('base64url');
  const created = await withStore(options, async (store) => {
    if (!(await store.tenants.get(options.tenant))) throw new CliError('NOT_FOUND', `no tenant ${options.tenant}`);
    try {
      return await store.portalUsers.create(options.tenant, options.email, password);
    } catch (error) {
      if (error instanceof ConflictError) throw new CliError(error.code, error.message);
      throw error;
    }
  });
  const generated = options.password === undefined;
  print(
    options.json,
    { id: created.id, email: created.email, tenantId: created.tenantId, ...(generated && { password }) },
    generated ? `user      ${created.email}\npassword  ${password}   (shown once)` : `user ${created.email} created`,
  );
});
storeOptions(user.command('list').description("list a tenant's portal users").requiredOption('--tenant <id>').option('--json')).action(
  async (options: { tenant: string; json?: boolean }) => {
    const users = await withStore(options, (store) => store.portalUsers.list(options.tenant));
    print(
      options.json,
      { data: users },
      users.map((u) => `${u.email}  ${u.disabledAt ? `disabled ${u.disabledAt}` : 'active'}  created ${u.createdAt}`).join('\n'),
    );
  },
);

storeOptions(
  program
    .command('backup')
    .description('copy the SQLite store to FILE while the service runs (PostgreSQL: says how to use pg_dump)')
    .argument('<file>', 'the backup file to write')
    .option('--force', 'replace FILE if it exists')
    .option('--json'),
).action(async (file: string, options: { force?: boolean; json?: boolean }) => {
  const report = await backupStore(settingsFrom(options), file, { force: options.force === true });
  const { counts } = report;
  print(
    options.json,
    report,
    [
      `backup  ${report.file} (${report.bytes} bytes, schema version ${report.schemaVersion})`,
      `holds   ${counts.tenants} tenant(s), ${counts.serviceAccounts} service account(s), ${counts.trafficConfigs} configuration(s), ${counts.certificates} certificate(s), ${counts.caCertificates} CA certificate(s), ${counts.insightEvents} event(s)`,
      `master key  ${report.masterKey.source === 'file' ? report.masterKey.file : report.masterKey.source}${report.masterKey.fingerprint ? ` (fingerprint ${report.masterKey.fingerprint})` : ''}`,
      report.masterKey.note,
    ].join('\n'),
  );
});

storeOptions(
  program
    .command('restore')
    .description('restore a backup into the data directory (a new or empty one; --force replaces a store)')
    .argument('<file>', 'a file written by tps backup')
    .option('--force', 'replace a store that holds data (stop the service first)')
    .option('--json'),
).action(async (file: string, options: { force?: boolean; json?: boolean }) => {
  const report = await restoreStore(settingsFrom(options), file, { force: options.force === true });
  const { counts } = report;
  print(
    options.json,
    report,
    [
      `restored  ${report.file} into ${report.store} (schema version ${report.schemaVersion.backup}${report.schemaVersion.restored !== report.schemaVersion.backup ? `, migrated to ${report.schemaVersion.restored}` : ''})`,
      `holds     ${counts.tenants} tenant(s), ${counts.serviceAccounts} service account(s), ${counts.trafficConfigs} configuration(s), ${counts.certificates} certificate(s), ${counts.caCertificates} CA certificate(s), ${counts.insightEvents} event(s)`,
      `master key opens all ${report.privateKeysChecked} private key(s) of the backup`,
    ].join('\n'),
  );
});

storeOptions(program.command('status').description('edge nodes, configurations and their status, apply lag').option('--json')).action(
  async (options: { json?: boolean }) => {
    const settings = settingsFrom(options);
    if (!settings.databaseUrl && !fs.existsSync(sqliteFile(settings.dataDir))) {
      throw new CliError('NO_STORE', `there is no store at ${sqliteFile(settings.dataDir)} (set --data-dir or TPS_DATA_DIR)`);
    }
    const report = await withStore(options, (store) => storeStatus(store, settings));
    print(options.json, report, describeStatus(report));
  },
);

/** Flags of the commands that call the public API as a service account. */
const apiClientOptions = (command: Command) =>
  command
    .addOption(new Option('--api-url <url>', `the API's base URL (${API_CLIENT_ENV.apiUrl}, default http://TPS_API_LISTEN)`))
    .addOption(new Option('--client-id <id>', `a service account of the tenant (${API_CLIENT_ENV.clientId})`))
    .addOption(
      new Option('--client-secret <secret>', `its secret (${API_CLIENT_ENV.clientSecret}; the variable keeps it out of the process list)`),
    );

apiClientOptions(
  program
    .command('apply')
    .description("make the tenant's proxies, certificates and CA certificates equal to a YAML file")
    .requiredOption('-f, --file <file>', 'the configuration file (YAML or JSON; - reads stdin)')
    .option('--dry-run', 'print the changes without making them')
    .option('--json'),
).action(async (options: { file: string; dryRun?: boolean; apiUrl?: string; clientId?: string; clientSecret?: string; json?: boolean }) => {
  const settings = loadApiClientSettings(options);
  const report = await applyFile({ file: options.file, dryRun: options.dryRun === true, settings });
  print(options.json, report, describeReport(report));
});

apiClientOptions(
  program
    .command('export')
    .description("write the tenant's proxies, certificates and CA certificates in the format tps apply reads")
    .option('-o, --output <file>', 'write to this file instead of stdout')
    .option('--json', 'the same content as JSON'),
).action(async (options: { output?: string; apiUrl?: string; clientId?: string; clientSecret?: string; json?: boolean }) => {
  const session = await ApiSession.connect(loadApiClientSettings(options));
  const current = await session.currentState();
  const exported = exportState(current);
  const text = options.json ? `${JSON.stringify(exported, null, 2)}\n` : exportYaml(current, exported);
  if (options.output) {
    fs.writeFileSync(options.output, text, { mode: 0o600 });
    print(options.json, { file: options.output, tenantId: current.tenantId }, `wrote ${options.output}`);
  } else {
    process.stdout.write(text);
  }
});

try {
  await program.parseAsync();
} catch (error) {
  // Exit at once: a command that failed half-way may hold the store or timers open.
  process.exit(failure(error));
}

/** Reports any failure as the mode asks; returns the exit code. */
function failure(error: unknown): number {
  if (error instanceof CommanderError) {
    // --help and --version end the parse with exit code 0.
    if (error.exitCode === 0) return 0;
    // Without --json commander has printed the message and the usage already.
    if (!json) return EXIT_USAGE;
    return reportFailure(json, [{ code: 'USAGE', detail: error.message.replace(/^error: /, '') }], EXIT_USAGE);
  }
  if (error instanceof CliError) return reportFailure(json, error.errors, error.exitCode);
  if (error instanceof SettingsError) return reportFailure(json, [{ code: 'INVALID_SETTING', detail: error.message }], EXIT_USAGE);
  const detail = error instanceof Error ? error.message : String(error);
  if (process.env.TPS_LOG_LEVEL === 'debug' && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  return reportFailure(json, [{ code: 'FAILED', detail }], EXIT_FAILED);
}
