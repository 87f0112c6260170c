/**
 * The `tps` command for operators and scripts. Every command that prints takes --json and then
 * prints exactly one JSON object.
 */
import crypto from 'node:crypto';
import { Command, Option } from 'commander';
import { loadSettings, SettingsError, SETTINGS_ENV, type SettingsInput } from '../config/settings.ts';
import { openStore, type Store } from '../store/index.ts';
import { SCOPES, type Scope } from '../store/service-accounts.ts';
import { MIN_PASSWORD_LENGTH } from '../store/portal-users.ts';
import { ConflictError } from '../store/errors.ts';
import { serve, runEdgeNode } from './serve.ts';

const program = new Command('tps')
  .description('Self-hosted traffic protection service: proxies with WAF, rate limiting, geo fencing and TLS.')
  .showHelpAfterError()
  .configureHelp({ sortSubcommands: true });

/** Flags every command accepts: where the store is. */
const storeOptions = (command: Command) =>
  command
    .addOption(new Option('--data-dir <dir>', `folder of the SQLite store (${SETTINGS_ENV.dataDir})`))
    .addOption(new Option('--database-url <url>', `postgres://... instead of SQLite (${SETTINGS_ENV.databaseUrl})`));

/** Flags of the edge's client address (serve and edge): which load balancers are trusted, and how. */
const clientAddressOptions = (command: Command) =>
  command
    .addOption(new Option('--metrics-listen <host:port>', `operators' listener of /metrics and /healthz (${SETTINGS_ENV.metricsListen}, default 127.0.0.1:9464)`))
    .addOption(new Option('--trusted-proxies <list>', `comma list of CIDRs of load balancers whose PROXY headers and X-Forwarded-For are trusted (${SETTINGS_ENV.trustedProxies})`))
    .addOption(new Option('--listener-proxy-protocol <mode>', `off, optional or required: PROXY protocol headers from trusted peers (${SETTINGS_ENV.listenerProxyProtocol}, default off)`));

const settingsFrom = (options: Record<string, string | boolean | undefined>) => loadSettings(options as SettingsInput);

async function withStore<T>(options: Record<string, string | boolean | undefined>, work: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(settingsFrom(options));
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

function print(json: boolean | undefined, value: object, text: string): void {
  process.stdout.write(json ? `${JSON.stringify(value)}\n` : `${text}\n`);
}

function fail(message: string): never {
  process.stderr.write(`tps: ${message}\n`);
  process.exit(2);
}

storeOptions(
  clientAddressOptions(
    program
      .command('serve')
      .description('run the API, token issuer and edge')
      .option('--demo', 'seed a demo tenant and print a client id, secret and a ready curl line')
      .addOption(new Option('--api-listen <host:port>', `API listener (${SETTINGS_ENV.apiListen}, default 127.0.0.1:8080)`))
      .addOption(new Option('--base-url <url>', `the service's base address (${SETTINGS_ENV.baseUrl})`))
      .addOption(new Option('--auth-url <url>', `the token issuer's address (${SETTINGS_ENV.authUrl})`))
      .addOption(new Option('--frontend-ips <list>', `comma list of front-end IPs offered to tenants (${SETTINGS_ENV.frontendIps})`))
      .addOption(new Option('--location <code>', `three-letter edge location code (${SETTINGS_ENV.location})`)),
  ),
).action(async (options: Record<string, string | boolean | undefined>) => {
  const { demo, ...flags } = options;
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
  const scopes = options.scopes.split(',').map((scope) => scope.trim()).filter(Boolean);
  const unknown = scopes.filter((scope) => !(SCOPES as readonly string[]).includes(scope));
  if (unknown.length > 0 || scopes.length === 0) fail(`--scopes must list some of ${SCOPES.join(', ')}; got "${options.scopes}"`);
  const account = await withStore(options, async (store) => {
    if (!(await store.tenants.get(options.tenant))) fail(`no tenant ${options.tenant}`);
    return store.serviceAccounts.create(options.tenant, options.name, scopes as Scope[]);
  });
  print(
    options.json,
    { clientId: account.clientId, clientSecret: account.clientSecret, tenantId: account.tenantId, scopes: account.scopes },
    `client id      ${account.clientId}\nclient secret  ${account.clientSecret}   (shown once)`,
  );
});
storeOptions(serviceAccount.command('list').description("list a tenant's service accounts").requiredOption('--tenant <id>').option('--json')).action(
  async (options: { tenant: string; json?: boolean }) => {
    const accounts = await withStore(options, (store) => store.serviceAccounts.list(options.tenant));
    print(
      options.json,
      { data: accounts },
      accounts.map((a) => `${a.clientId}  ${a.scopes.join(',')}  ${a.revokedAt ? `revoked ${a.revokedAt}` : 'active'}  ${a.name}`).join('\n'),
    );
  },
);
storeOptions(
  serviceAccount
    .command('revoke')
    .description('revoke a service account: its secret and all its tokens stop working')
    .requiredOption('--client-id <id>')
    .option('--json'),
).action(async (options: { clientId: string; json?: boolean }) => {
  const account = await withStore(options, (store) => store.serviceAccounts.revoke(undefined, options.clientId));
  if (!account) fail(`no service account ${options.clientId}`);
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
    if (!(await store.tenants.get(options.tenant))) fail(`no tenant ${options.tenant}`);
    try {
      return await store.portalUsers.create(options.tenant, options.email, password);
    } catch (error) {
      if (error instanceof ConflictError) fail(error.message);
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

try {
  await program.parseAsync();
} catch (error) {
  if (error instanceof SettingsError) fail(error.message);
  throw error;
}
