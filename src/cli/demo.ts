/**
 * `tps serve --demo`: a demo tenant with a service account and a portal user, and the product
 * doing its main job at once: a small origin on loopback (127.0.0.1, a port of its own), an HTTP
 * proxy in front of it on the first front-end IP (WAF blocking, a rate limit), made through the
 * public API like any client's. It prints what to run: a request that passes, an attack the WAF
 * blocks (with its support id), a burst the rate limit stops, and where the portal shows the events.
 *
 * The proxy is the demo tenant's and stays in the store (its id in DATA_DIR/demo-proxy.json): each
 * start points it at the new origin's port. The origin is on loopback, which the origin policy
 * refuses unless TPS_ORIGIN_ALLOWED_NETWORKS allows it (scripts/demo.sh sets 127.0.0.0/8).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Settings } from '../config/settings.ts';
import type { Store } from '../store/index.ts';
import type { Scope } from '../store/service-accounts.ts';
import type { PublicUrls } from '../api/types.ts';
import type { EdgeSupervisor } from '../edge/runtime/supervisor.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const JSONAPI = 'application/vnd.api+json';
/** Ports the demo proxy tries first (easy to type), then any free one. */
const PREFERRED_PORTS = [8000, 8001, 8002, 8003, 8004, 8005, 8006, 8007, 8008, 8009];
const ORIGIN_HOST = '127.0.0.1';
const RATE_LIMIT = { requests: 20, periodSeconds: 10 };
const BLOCK_SECONDS = 10;
/** An XSS probe, percent-encoded so that the shell and curl send it as is. */
const ATTACK_QUERY = '?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E';

export interface DemoOptions {
  store: Store;
  app: FastifyInstance;
  urls: PublicUrls;
  settings: Settings;
  edge: EdgeSupervisor | undefined;
  logger: { warn(details: object, message: string): void };
  /** Where the demo prints; default standard output. */
  print?: (text: string) => void;
}

export interface RunningDemo {
  /** The demo proxy's URL (absent when it could not be made). */
  proxyUrl: string | undefined;
  close(): Promise<void>;
}

export async function startDemo(options: DemoOptions): Promise<RunningDemo> {
  const { store, urls } = options;
  const print = options.print ?? ((text: string) => void process.stdout.write(text));
  const tenant = (await store.tenants.findByName('demo')) ?? (await store.tenants.create('demo'));
  const scopes: Scope[] = ['read', 'write', 'insight'];
  const account = await store.serviceAccounts.create(tenant.id, 'demo', scopes);
  // A portal user too, with a fresh password each start (the store keeps only its hash).
  const password = crypto.randomBytes(12).toString('base64url');
  const email = `demo-${crypto.randomBytes(3).toString('hex')}@example.com`;
  await store.portalUsers.create(tenant.id, email, password);
  const tokenBody = {
    client_id: account.clientId,
    client_secret: account.clientSecret,
    grant_type: 'client_credentials',
    audience: urls.baseUrl,
  };

  const origin = await startOrigin();
  const originPort = (origin.address() as AddressInfo).port;
  const lines = [
    '',
    '  Traffic protection service: demo',
    `  API and docs     ${urls.baseUrl}/docs`,
    `  portal           ${urls.baseUrl}/portal   (${email} / ${password})`,
    `  tenant id        ${tenant.id}`,
    `  client id        ${account.clientId}`,
    `  client secret    ${account.clientSecret}   (shown once)`,
    '',
    '  Get an access token:',
    `  curl -s -X POST ${urls.authUrl}/oauth/token -H 'Content-Type: application/json' -d '${JSON.stringify(tokenBody)}'`,
    '',
    '  Then list the front-end IPs:',
    `  curl -s ${urls.baseUrl}/api/v1/traffic-mgmt/accounts/${tenant.id}/ips -H "Authorization: Bearer $TOKEN"`,
    '',
  ];
  let proxyUrl: string | undefined;
  try {
    const proxy = await demoProxy(options, tenant.id, tokenBody, originPort);
    proxyUrl = proxy.url;
    const served = options.edge === undefined ? false : await waitUntilServed(options.edge, proxy.id, 15_000);
    lines.push(
      `  A demo origin answers on http://${ORIGIN_HOST}:${originPort}; the demo proxy ${proxy.id}`,
      `  serves it on ${proxy.url} (WAF blocking, at most ${RATE_LIMIT.requests} requests per ${RATE_LIMIT.periodSeconds} s per client).`,
      `  The demo allows origins on loopback: TPS_ORIGIN_ALLOWED_NETWORKS=${options.settings.originAllowedNetworks.join(',')}.`,
      ...(served ? [] : ["  (The edge does not serve it yet: TPS_EDGE=false, or its port cannot be bound; see the proxy's status.)"]),
      '',
      '  A request that passes (the origin answers):',
      `  curl -s ${proxy.url}/`,
      '',
      '  An attack the WAF blocks (403, with the support id of the event):',
      `  curl -s -o /dev/null -w '%{http_code} support id %header{x-request-id}\\n' '${proxy.url}/${ATTACK_QUERY}'`,
      '',
      `  A burst the rate limit stops (429 after ${RATE_LIMIT.requests} requests, for ${BLOCK_SECONDS} s):`,
      `  for i in $(seq 1 25); do curl -s -o /dev/null -w '%{http_code} ' ${proxy.url}/; done; echo`,
      '',
      `  The events: ${urls.baseUrl}/portal/waf (WAF events: find the support id) and ${urls.baseUrl}/portal/rate-limiting,`,
      `  or GET ${urls.baseUrl}/api/v2/insight/http-security-events?filter[tenantId]=${tenant.id} with the token.`,
      '',
    );
  } catch (error) {
    options.logger.warn({ err: error }, 'demo proxy not made');
    const message = (error as Error).message;
    lines.push(`  The demo proxy could not be made: ${message}`);
    if (message.includes('ORIGIN_NOT_ALLOWED'))
      lines.push('  Its origin is on loopback: start with TPS_ORIGIN_ALLOWED_NETWORKS=127.0.0.0/8 (scripts/demo.sh does).');
    lines.push('');
  }
  print(`${lines.join('\n')}\n`);
  return {
    proxyUrl,
    close: () =>
      new Promise<void>((resolve) => {
        origin.close(() => resolve());
        origin.closeAllConnections();
      }),
  };
}

/** The origin: a few lines of text for any GET, on a loopback port of its own. */
function startOrigin(): Promise<http.Server> {
  const server = http.createServer((request, response) => {
    request.resume();
    const body = `Hello from the demo origin: ${request.method} ${request.url}\n`;
    response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body) }).end(body);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: ORIGIN_HOST, port: 0 }, () => resolve(server));
  });
}

/** Calls the API in process, as the demo tenant's service account. */
async function apiClient(app: FastifyInstance, tokenBody: object) {
  const token = await app.inject({
    method: 'POST',
    url: '/oauth/token',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify(tokenBody),
  });
  if (token.statusCode !== 200) throw new Error(`the demo account got no token: ${token.statusCode} ${token.body}`);
  const accessToken = (token.json() as { access_token: string }).access_token;
  return async (method: 'GET' | 'POST' | 'PUT', url: string, body?: object) => {
    const answer = await app.inject({
      method,
      url,
      headers: { authorization: `Bearer ${accessToken}`, ...(body && { 'content-type': JSONAPI }) },
      ...(body && { payload: JSON.stringify(body) }),
    });
    return {
      status: answer.statusCode,
      body:
        answer.body === ''
          ? undefined
          : (answer.json() as { data?: { id: string; attributes: Record<string, unknown> }; errors?: { code: string; detail: string }[] }),
    };
  };
}

/** The demo proxy: the one of an earlier start pointed at this origin, or a new one on a free port. */
async function demoProxy(
  options: DemoOptions,
  tenantId: string,
  tokenBody: object,
  originPort: number,
): Promise<{ id: string; url: string }> {
  const ipv4 = options.settings.frontendIps.find((ip) => net.isIPv4(ip));
  if (ipv4 === undefined) throw new Error('no IPv4 front-end IP in TPS_FRONTEND_IPS');
  const call = await apiClient(options.app, tokenBody);
  const attributes = (port: number) => ({
    frontend: { ipv4, port },
    backend: { hosts: [{ address: ORIGIN_HOST, port: originPort }] },
    waf: { mode: 'BLOCKING', paranoiaLevel: 1 },
    rateLimiting: { thresholds: [RATE_LIMIT], blockSeconds: BLOCK_SECONDS },
  });
  const remembered = path.join(options.settings.dataDir, 'demo-proxy.json');
  const known = readRemembered(remembered);
  if (known !== undefined) {
    const existing = await call('GET', `${CONFIGS}/${known}`);
    const frontend = existing.body?.data?.attributes.frontend as { ipv4?: string; port?: number } | undefined;
    if (existing.status === 200 && frontend?.ipv4 === ipv4 && frontend.port !== undefined) {
      const replaced = await call('PUT', `${CONFIGS}/${known}`, {
        data: { type: 'httpProxy', id: known, attributes: attributes(frontend.port) },
      });
      if (replaced.status !== 200) throw new Error(describeErrors(replaced));
      return { id: known, url: `http://${ipv4}:${frontend.port}` };
    }
  }
  for (const port of [...PREFERRED_PORTS, 0]) {
    const chosen = port === 0 ? await anyFreePort(ipv4) : port;
    if (!(await isFree(ipv4, chosen))) continue;
    const created = await call('POST', CONFIGS, { data: { type: 'httpProxy', attributes: attributes(chosen) } });
    if (created.status === 409) continue;
    if (created.status !== 201 || created.body?.data === undefined) throw new Error(describeErrors(created));
    fs.writeFileSync(remembered, `${JSON.stringify({ id: created.body.data.id, tenantId })}\n`, { mode: 0o600 });
    return { id: created.body.data.id, url: `http://${ipv4}:${chosen}` };
  }
  throw new Error(`no free port on ${ipv4}`);
}

function readRemembered(file: string): string | undefined {
  try {
    const id = (JSON.parse(fs.readFileSync(file, 'utf8')) as { id?: unknown }).id;
    return typeof id === 'string' && /^[0-9a-f-]{36}$/.test(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

function describeErrors(answer: { status: number; body?: { errors?: { code: string; detail: string }[] } }): string {
  const errors = answer.body?.errors ?? [];
  return errors.length === 0 ? `the API answered ${answer.status}` : errors.map((error) => `${error.code}: ${error.detail}`).join('; ');
}

function isFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

function anyFreePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen({ host, port: 0 }, () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function waitUntilServed(edge: EdgeSupervisor, id: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (edge.servingWorkers(id) > 0 && (await edge.whenApplied(500))) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}
