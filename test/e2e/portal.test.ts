/**
 * The portal in headless Chromium against a started `tps serve` (with its edge): sign-in, service
 * accounts (secret shown once), proxies (validation errors beside their fields, status turning
 * ACTIVE), certificates, both dashboards with seeded events (numbers equal to what the export API
 * reports), and one tenant's user kept out of another tenant's data.
 *
 * Screenshots of every page go to test-output/portal/. With TPS_PORTAL_DOCS_SCREENSHOT=1 the WAF
 * dashboard is also written to docs/portal-waf-dashboard.png (the one shown in the README).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { startTps, createTenant, openStoreOf, REPO_ROOT, type Tps, type Credentials } from '../support/tps.ts';
import { TenantApi, request } from '../support/api-client.ts';
import { wafEvent, rateLimitEvent, type InsightEvent } from '../support/events.ts';
import { launchBrowser, screenshot, until, type Browser } from '../support/browser.ts';
import { freePort } from '../support/ports.ts';
import { TestCa } from '../support/pki.ts';
import type { Store } from '../../src/store/index.ts';

const EVENTS = '/api/v2/insight/http-security-events';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const HOUR = 3600_000;

interface PortalUser {
  email: string;
  password: string;
}

function ensurePortalBuilt(): void {
  if (fs.existsSync(path.join(REPO_ROOT, 'src/portal/dist/index.html'))) return;
  execFileSync('npm', ['run', '--silent', 'build:portal'], { cwd: REPO_ROOT, stdio: 'inherit' });
}

async function signIn(page: Page, tps: Tps, user: PortalUser): Promise<void> {
  await page.goto(`${tps.url}/portal/`);
  await page.locator('#email').fill(user.email);
  await page.locator('#password').fill(user.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByTestId('signed-in-as').waitFor();
}

const numberIn = async (page: Page, testId: string) => Number((await page.getByTestId(testId).textContent())!.replace(/[^\d]/g, ''));

/** A top list as shown: key -> count. */
async function topList(page: Page, testId: string): Promise<Record<string, number>> {
  const entries = await page
    .getByTestId(testId)
    .locator('li')
    .evaluateAll((items) =>
      items.map((item) => [item.getAttribute('data-key'), item.querySelector('[data-testid="count"]')?.textContent ?? '']),
    );
  return Object.fromEntries(entries.map(([key, count]) => [key, Number(String(count).replace(/[^\d]/g, ''))]));
}

/** Every event of the tenant, read through the public export API. */
async function exported(api: TenantApi): Promise<InsightEvent[]> {
  const events: InsightEvent[] = [];
  let pathAndQuery = `${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=1000`;
  for (let page = 0; page < 50; page++) {
    const answer = await api.get(pathAndQuery);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    if (answer.body.data.length === 0) break;
    for (const resource of answer.body.data) {
      events.push({
        type: resource.type,
        id: resource.id,
        trafficConfigId: resource.relationships.trafficConfig.data.id,
        ...resource.attributes,
      } as InsightEvent);
    }
    pathAndQuery = answer.body.links.next;
  }
  return events;
}

function countBy<T>(items: T[], keys: (item: T) => (string | number)[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const item of items) for (const key of new Set(keys(item))) counts[String(key)] = (counts[String(key)] ?? 0) + 1;
  return counts;
}

describe('portal (headless Chromium against tps serve)', () => {
  let tps: Tps;
  let browser: Browser;
  let page: Page;
  let store: Store;
  let tenantA: Credentials;
  let tenantB: Credentials;
  let apiA: TenantApi;
  let userA: PortalUser;
  let userB: PortalUser;
  let seededConfigId: string;
  let busyPort: number;
  let eventIdOfA: string;
  let serviceAccountOfA: string;

  before(async () => {
    ensurePortalBuilt();
    tps = await startTps({ env: { TPS_EDGE: 'true', TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    tenantA = await createTenant(tps);
    tenantB = await createTenant(tps);
    apiA = await TenantApi.connect(tps, tenantA);
    const createdA = await tps.cli<{ email: string; password: string }>(
      'user',
      'create',
      '--tenant',
      tenantA.tenantId,
      '--email',
      'ops@tenant-a.example',
    );
    userA = { email: createdA.email, password: createdA.password };
    await tps.cli('user', 'create', '--tenant', tenantB.tenantId, '--email', 'ops@tenant-b.example', '--password', 'tenant-b-password');
    userB = { email: 'ops@tenant-b.example', password: 'tenant-b-password' };

    // A proxy of tenant A made through the API: its events feed the dashboards, its port is "busy".
    busyPort = await freePort('127.0.0.3');
    const proxy = await apiA.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: '127.0.0.3', port: busyPort },
          backend: { hosts: [{ address: '127.0.0.1', port: 9 }] },
          waf: { mode: 'LOGGING', paranoiaLevel: 2 },
          rateLimiting: { thresholds: [{ requests: 20, periodSeconds: 1 }], blockSeconds: 60 },
        },
      },
    });
    assert.equal(proxy.status, 201, JSON.stringify(proxy.body));
    seededConfigId = proxy.body.data.id;

    // A certificate that expires in 12 days (highlighted) and one that does not.
    const ca = await TestCa.create('Portal Test CA');
    for (const [name, days] of [
      ['soon.tenant-a.example', 12],
      ['www.tenant-a.example', 300],
    ] as const) {
      const leaf = await ca.issue({ commonName: name, dnsNames: [name], notAfter: new Date(Date.now() + days * 24 * HOUR) });
      const upload = await apiA.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
        data: {
          type: 'certificate',
          attributes: { certificate: leaf.certificatePem, intermediateCertificates: ca.chainPem, privateKey: leaf.privateKeyPem },
        },
      });
      assert.equal(upload.status, 201, JSON.stringify(upload.body));
    }
    const caUpload = await apiA.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: { type: 'caCertificate', attributes: { certificates: [{ certificate: ca.certificatePem }] } },
    });
    assert.equal(caUpload.status, 201, JSON.stringify(caUpload.body));

    // Events as edge nodes write them: spread over the last 23 hours, several rules, sources,
    // countries and paths, some only logged; rate-limit episodes; and another tenant's events.
    store = await openStoreOf(tps);
    const now = Date.now();
    const rules = [
      { modSecId: 942100, name: 'SQL Injection Attack Detected via libinjection' },
      { modSecId: 941100, name: 'XSS Attack Detected via libinjection' },
      { modSecId: 930120, name: 'OS File Access Attempt' },
      { modSecId: 920350, name: 'Host header is a numeric IP address' },
    ];
    const paths = ['/login', '/search', '/api/orders', '/wp-admin/setup-config.php'];
    const countries = ['DE', 'US', 'FR', 'CN', 'BR', 'NL'];
    const events: InsightEvent[] = [];
    for (let i = 0; i < 140; i++) {
      // More events in recent hours, so the chart has a shape.
      const ageMs = Math.floor(23 * HOUR * ((i * 0.618034) % 1) ** 1.6) + 60_000;
      const first = rules[i % 3 === 0 ? 0 : i % 5 === 0 ? 2 : i % 7 === 0 ? 3 : 1]!;
      events.push(
        wafEvent(tenantA.tenantId, seededConfigId, {
          timestamp: new Date(now - ageMs).toISOString(),
          action: i % 4 === 0 ? 'LOGGED' : 'BLOCKED',
          rules: [
            { ...first, matchedData: i === 0 ? { status: 'ENABLED', value: "1' OR '1'='1" } : { status: 'DISABLED', value: null } },
            ...(i % 6 === 0 ? [{ ...rules[3]!, matchedData: { status: 'DISABLED' as const, value: null } }] : []),
          ],
          source: { countryCode: countries[((i * 7) % 11) % countries.length]!, ip: `203.0.113.${10 + ((i * 5) % 9)}`, port: 40000 + i },
          request: {
            method: i % 3 === 0 ? 'POST' : 'GET',
            path: paths[((i * 3) % 7) % paths.length]!,
            headers: ['Host: shop.tenant-a.example', 'User-Agent: sqlmap/1.7'],
            messageHeader: `GET ${paths[0]}?q=1 HTTP/1.1\nHost: shop.tenant-a.example\nUser-Agent: sqlmap/1.7`,
            statusCode: i % 4 === 0 ? 200 : 403,
          },
        }),
      );
    }
    for (let i = 0; i < 18; i++) {
      const episode = rateLimitEvent(tenantA.tenantId, seededConfigId);
      const at = new Date(now - Math.floor(22 * HOUR * ((i * 0.381966) % 1)) - 60_000).toISOString();
      events.push({
        ...episode,
        timestamp: at,
        source: { countryCode: ['US', 'CN', 'BR'][i % 3]!, ip: `198.51.100.${20 + (i % 5)}`, port: 50000 + i },
        rateLimit: { ...episode.rateLimit, firstBlockedAt: at, lastBlockedAt: at, blockedRequests: 30 + i * 7 },
      });
    }
    // Arrival order is not time order (several edge nodes deliver late).
    events.sort((a, b) => a.id.localeCompare(b.id));
    for (let i = 0; i < events.length; i += 40) await store.insightEvents.append(events.slice(i, i + 40));
    await store.insightEvents.append(
      Array.from({ length: 9 }, () =>
        wafEvent(tenantB.tenantId, '22222222-2222-4222-8222-222222222222', {
          source: { countryCode: 'JP', ip: '192.0.2.99', port: 1 },
          request: { method: 'GET', path: '/tenant-b-only', headers: [], messageHeader: 'GET /tenant-b-only HTTP/1.1', statusCode: 403 },
        }),
      ),
    );
    eventIdOfA = events.find((event) => event.type === 'WAF_EVENT')!.id;

    browser = await launchBrowser();
    page = browser.page;
  });

  after(async () => {
    await browser?.close();
    await store?.close();
    await tps?.stop();
  });

  it('signs in, and refuses a wrong password', async () => {
    await page.goto(`${tps.url}/portal/`);
    await page.locator('#email').waitFor();
    await screenshot(page, '01-login');
    await page.locator('#email').fill(userA.email);
    await page.locator('#password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    assert.match((await page.getByTestId('login-error').textContent())!, /wrong email or password/);
    await signIn(page, tps, userA);
    assert.equal(await page.getByTestId('signed-in-as').textContent(), userA.email);
    const cookies = await browser.context.cookies(tps.url);
    const session = cookies.find((cookie) => cookie.name === 'tps_session');
    assert.ok(session, 'a session cookie is set');
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
  });

  it('creates a service account and shows its secret once', async () => {
    await page.getByTestId('nav Service accounts').click();
    await page.locator('#f--name').fill('ci-deploy');
    await page.locator('input[name="scope-insight"]').check();
    await page.getByRole('button', { name: 'Create service account' }).click();
    const secretBox = page.getByTestId('new-secret');
    await secretBox.waitFor();
    assert.match((await secretBox.textContent())!, /shown only this once/);
    const clientId = (await page.getByTestId('new-client-id').textContent())!;
    const clientSecret = (await page.getByTestId('new-client-secret').textContent())!;
    assert.match(clientSecret, /^tps_/);
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: tps.url });
    await page.getByTestId('copy-secret').click();
    assert.equal(
      await page.evaluate(() =>
        (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText(),
      ),
      clientSecret,
      'the copy button copies the secret',
    );
    await page.getByRole('button', { name: 'Copied' }).waitFor();
    await screenshot(page, '02-service-account-secret');

    // The secret works: it gets an access token with the scopes chosen.
    const token = await request(`${tps.url}/oauth/token`, {
      method: 'POST',
      contentType: 'application/json',
      body: { client_id: clientId, client_secret: clientSecret, grant_type: 'client_credentials', audience: tps.url },
    });
    assert.equal(token.status, 200, JSON.stringify(token.body));
    assert.equal(token.body.scope, 'read insight');

    // Once acknowledged, it is gone: not in the page, not after a reload, not in the list's data.
    await page.getByTestId('secret-stored').click();
    assert.ok(!(await page.content()).includes(clientSecret));
    await page.reload();
    await page.locator(`tr[data-client-id="${clientId}"]`).waitFor();
    assert.ok(!(await page.content()).includes(clientSecret));
    const listed = await page.evaluate(async () => (await fetch('/portal/api/service-accounts')).text());
    assert.ok(listed.includes(clientId) && !listed.includes(clientSecret));
    serviceAccountOfA = clientId;
    await screenshot(page, '03-service-accounts');

    // Revoke it from the list: its credentials stop working.
    const row = page.locator(`tr[data-client-id="${clientId}"]`);
    await row.getByRole('button', { name: 'Revoke…' }).click();
    await row.getByRole('button', { name: 'Revoke', exact: true }).click();
    await row.getByText('revoked').waitFor();
    const refused = await request(`${tps.url}/oauth/token`, {
      method: 'POST',
      contentType: 'application/json',
      body: { client_id: clientId, client_secret: clientSecret, grant_type: 'client_credentials', audience: tps.url },
    });
    assert.equal(refused.status, 401);
  });

  it('shows validation errors beside their fields: from the schema and from the API', async () => {
    await page.getByTestId('nav Proxies').click();
    await page.getByTestId('new-proxy').click();
    await page.locator('label.kind', { hasText: 'Layer 4 proxy' }).click();
    const portField = page.locator('[data-pointer="/data/attributes/frontend/port"]');
    const addressField = page.locator('[data-pointer="/data/attributes/backend/hosts/0/address"]');

    // Checked here against the API's own schema, before anything is sent.
    await page.locator('select[name="ipv4"]').selectOption('127.0.0.3');
    await page.locator('input[name="port"]').fill('70000');
    await page.getByTestId('save-proxy').click();
    assert.equal(await portField.locator('.field-error').textContent(), 'must be <= 65535');
    assert.equal(await addressField.locator('.field-error').textContent(), 'is required');
    await screenshot(page, '04-proxy-form-validation');

    // Refused by the API: the port is taken on that IP (409, pointer /data/attributes/frontend/port).
    await page.locator('input[name="port"]').fill(String(busyPort));
    assert.match((await page.getByTestId('port-hint').textContent())!, new RegExp(`Port ${busyPort} is taken on 127\\.0\\.0\\.3`));
    await page.locator('input[name="host-0-address"]').fill('127.0.0.1');
    await page.locator('input[name="host-0-port"]').fill('9');
    await page.getByTestId('save-proxy').click();
    await portField.locator('.field-error').waitFor();
    assert.match(
      (await portField.locator('.field-error').textContent())!,
      new RegExp(`port ${busyPort}/TCP on 127\\.0\\.0\\.3 is already assigned`),
    );
    assert.equal(await addressField.locator('.field-error').count(), 0);
    await screenshot(page, '05-proxy-form-port-in-use');
  });

  /** Fills the new-proxy form, saves, and waits (30 s at most) for the status the edge reports. */
  async function createProxyInPortal(kind: 'httpProxy' | 'l4Proxy'): Promise<{ id: string; shown: string }> {
    const port = await freePort('127.0.0.2');
    await page.getByTestId('nav Proxies').click();
    await page.getByTestId('new-proxy').click();
    if (kind === 'l4Proxy') await page.locator('label.kind', { hasText: 'Layer 4 proxy' }).click();
    await page.locator('select[name="ipv4"]').selectOption('127.0.0.2');
    await page.locator('input[name="port"]').fill(String(port));
    assert.match((await page.getByTestId('port-hint').textContent())!, new RegExp(`Port ${port} is free on 127\\.0\\.0\\.2`));
    await page.locator('input[name="host-0-address"]').fill('127.0.0.1');
    await page.locator('input[name="host-0-port"]').fill('9');
    if (kind === 'httpProxy') await page.locator('select[name="wafMode"]').selectOption('LOGGING');
    await page.getByTestId('save-proxy').click();
    await page.waitForURL(/\/portal\/proxies\/[0-9a-f-]{36}$/);
    const id = page.url().split('/').at(-1)!;
    // The edge serves it within seconds; the page follows the status by itself.
    const shown = await until(
      'the proxy to leave PROVISIONING',
      async () => {
        const text = (await page.getByTestId('saved-status').textContent()) ?? '';
        return /ACTIVE|ERROR/.test(text) && text;
      },
      30_000,
    );
    return { id, shown };
  }

  it('creates a layer 4 proxy and sees it turn ACTIVE', async () => {
    const { id, shown } = await createProxyInPortal('l4Proxy');
    assert.match(shown, /^ACTIVE/, `the edge reports: ${shown}`);
    await screenshot(page, '06-l4-proxy-active');
    assert.equal((await apiA.get(`${CONFIGS}/${id}`)).body.data.attributes.status, 'ACTIVE');
    await page.getByTestId('nav Proxies').click();
    const row = page.locator(`tr[data-proxy-id="${id}"]`);
    await until('the list to show ACTIVE', async () => (await row.getByTestId('proxy-status').textContent()) === 'ACTIVE');
    await screenshot(page, '07-proxies');
  });

  it('creates an HTTP proxy and sees it turn ACTIVE', async () => {
    const { id, shown } = await createProxyInPortal('httpProxy');
    assert.match(shown, /^ACTIVE/, `the edge reports: ${shown}`);
    await screenshot(page, '06-http-proxy-active');
    const viaApi = await apiA.get(`${CONFIGS}/${id}`);
    assert.equal(viaApi.body.data.attributes.status, 'ACTIVE');
    assert.equal(viaApi.body.data.attributes.waf.mode, 'LOGGING');
    await page.getByTestId('nav Proxies').click();
    const row = page.locator(`tr[data-proxy-id="${id}"]`);
    await until('the list to show ACTIVE', async () => (await row.getByTestId('proxy-status').textContent()) === 'ACTIVE');
    await screenshot(page, '07-proxies-with-http');
  });

  it('lists certificates with their expiry, the one expiring soon highlighted', async () => {
    await page.getByTestId('nav Certificates').click();
    const soon = page.locator('tr', { hasText: 'soon.tenant-a.example' });
    await soon.waitFor();
    assert.match((await soon.getByTestId('expiry').textContent())!, /expiring soon/);
    assert.equal(await soon.getAttribute('class'), 'row-warning');
    const later = page.locator('tr', { hasText: 'www.tenant-a.example' });
    assert.doesNotMatch((await later.getByTestId('expiry').textContent())!, /expiring soon/);
    await screenshot(page, '08-certificates');
    await page.getByTestId('nav CA certificates').click();
    await page.locator('tr', { hasText: 'Portal Test CA' }).waitFor();
    await screenshot(page, '09-ca-certificates');
  });

  it('shows the WAF dashboard with the numbers the API reports', async () => {
    const waf = (await exported(apiA)).filter((event) => event.type === 'WAF_EVENT');
    assert.equal(waf.length, 140);
    await page.getByTestId('nav WAF events').click();
    await page.getByTestId('total-events').waitFor();
    await page.getByTestId('waf-chart').locator('canvas').waitFor();
    assert.equal(await numberIn(page, 'total-events'), waf.length);
    assert.equal(await numberIn(page, 'total-blocked'), waf.filter((event) => event.action === 'BLOCKED').length);
    assert.equal(await numberIn(page, 'total-logged'), waf.filter((event) => event.action === 'LOGGED').length);
    assert.equal(await numberIn(page, 'total-sources'), new Set(waf.map((event) => event.source.ip)).size);
    assert.deepEqual(
      await topList(page, 'top-rules'),
      countBy(waf, (event) => event.rules.map((rule) => rule.modSecId)),
    );
    assert.deepEqual(
      await topList(page, 'top-ips'),
      countBy(waf, (event) => [event.source.ip]),
    );
    assert.deepEqual(
      await topList(page, 'top-countries'),
      countBy(waf, (event) => [event.source.countryCode]),
    );
    assert.deepEqual(
      await topList(page, 'top-paths'),
      countBy(waf, (event) => [event.request.path]),
    );
    const first = await screenshot(page, '10-waf-dashboard');
    if (process.env.TPS_PORTAL_DOCS_SCREENSHOT === '1') {
      await page.setViewportSize({ width: 1440, height: 1180 });
      await page.screenshot({ path: path.join(REPO_ROOT, 'docs/portal-waf-dashboard.png') });
      await page.setViewportSize({ width: 1440, height: 960 });
    }
    assert.ok(fs.statSync(first).size > 0);

    // Narrowed to one proxy: the same numbers (all events are of that proxy); to another: none.
    await page.getByTestId('filter-proxy').selectOption(seededConfigId);
    await until('the proxy filter', async () => page.url().includes(`proxy=${seededConfigId}`));
    await until('the filtered totals', async () => (await numberIn(page, 'total-events')) === waf.length);

    // A top rule narrows the event list to that rule's events; one event opens with its rules.
    await page.getByTestId('top-rules').locator('li[data-key="942100"] a').click();
    await until('the rule filter', async () => page.url().includes('rule=942100'));
    const rows = page.getByTestId('event-list').locator('tbody tr');
    await until(
      'the events of rule 942100',
      async () => (await rows.count()) === Math.min(25, waf.filter((e) => e.rules.some((r) => r.modSecId === 942100)).length),
    );
    const withData = waf.find((event) => event.rules.some((rule) => rule.matchedData.status === 'ENABLED'))!;
    await page.goto(`${tps.url}/portal/waf/events/${withData.id}`);
    const detail = page.getByTestId('event-detail');
    await detail.getByTestId('event-rules').waitFor();
    const detailText = (await detail.textContent())!;
    assert.ok(detailText.includes('942100') && detailText.includes('SQL Injection Attack Detected via libinjection'));
    assert.ok(detailText.includes("1' OR '1'='1"), 'the matched data is shown');
    assert.ok(detailText.includes(withData.supportId));
    await detail.getByRole('button', { name: 'Exclude…' }).first().click();
    await screenshot(page, '11-waf-event-detail', false);
    await detail.getByRole('button', { name: 'Add exclusion to the proxy' }).click();
    await detail.getByText('Exclusion added').waitFor();
    const proxy = await apiA.get(`${CONFIGS}/${withData.trafficConfigId}`);
    assert.deepEqual(proxy.body.data.attributes.waf.ruleExclusions, [{ ruleIds: [942100], pathPrefix: withData.request.path }]);
  });

  it('shows the rate-limiting dashboard with the numbers the API reports', async () => {
    const episodes = (await exported(apiA)).filter((event) => event.type === 'APP_DDOS_ATTACK');
    assert.equal(episodes.length, 18);
    await page.getByTestId('nav Rate limiting').click();
    await page.getByTestId('total-episodes').waitFor();
    await page.getByTestId('ddos-chart').locator('canvas').waitFor();
    assert.equal(await numberIn(page, 'total-episodes'), episodes.length);
    assert.equal(await numberIn(page, 'total-sources'), new Set(episodes.map((event) => event.source.ip)).size);
    assert.deepEqual(
      await topList(page, 'top-sources'),
      countBy(episodes, (event) => [event.source.ip]),
    );
    assert.deepEqual(
      await topList(page, 'top-countries'),
      countBy(episodes, (event) => [event.source.countryCode]),
    );
    const list = page.getByTestId('episode-list').locator('tbody tr');
    await until('the episode list', async () => (await list.count()) === episodes.length);
    await list.first().click();
    await page.getByTestId('event-detail').getByText('Rate limit episode').waitFor();
    await screenshot(page, '12-rate-limiting', false);
  });

  it("keeps a user of tenant B out of tenant A's data", async () => {
    await browser.context.clearCookies();
    await signIn(page, tps, userB);
    assert.equal(await page.getByTestId('signed-in-as').textContent(), userB.email);
    // B's own dashboard: only B's 9 events.
    await page.getByTestId('nav WAF events').click();
    await until("B's totals", async () => (await numberIn(page, 'total-events')) === 9);
    assert.deepEqual(await topList(page, 'top-paths'), { '/tenant-b-only': 9 });
    await page.getByTestId('nav Proxies').click();
    await page.getByText('No proxies yet').waitFor();
    await page.getByTestId('nav Certificates').click();
    await page.getByText('No certificates yet').waitFor();
    await page.getByTestId('nav Service accounts').click();
    await page.locator('[data-testid="service-accounts"]').waitFor();
    assert.ok(!(await page.content()).includes(serviceAccountOfA));
    await screenshot(page, '13-tenant-b');

    // Direct requests with B's session for A's things: unknown, as for any other tenant.
    const answers = await page.evaluate(
      async ({ eventId, configId, tenantId, clientId }) => {
        const csrf = ((await (await fetch('/portal/api/session')).json()) as { csrfToken: string }).csrfToken;
        const status = async (url: string, init: RequestInit = {}) => (await fetch(url, init)).status;
        return {
          event: await status(`/portal/api/insight/events/${eventId}`),
          proxy: await status(`/api/v2/traffic-mgmt/traffic-configs/${configId}`),
          ips: await status(`/api/v1/traffic-mgmt/accounts/${tenantId}/ips`),
          export: await status(`/api/v2/insight/http-security-events?filter[tenantId]=${tenantId}`),
          revoke: await status(`/portal/api/service-accounts/${clientId}`, { method: 'DELETE', headers: { 'x-csrf-token': csrf } }),
          deleteProxy: await status(`/api/v2/traffic-mgmt/traffic-configs/${configId}`, {
            method: 'DELETE',
            headers: { 'x-csrf-token': csrf },
          }),
          deleteWithoutCsrf: await status(`/api/v2/traffic-mgmt/traffic-configs/${configId}`, { method: 'DELETE' }),
        };
      },
      { eventId: eventIdOfA, configId: seededConfigId, tenantId: tenantA.tenantId, clientId: serviceAccountOfA },
    );
    assert.deepEqual(answers, { event: 404, proxy: 404, ips: 404, export: 403, revoke: 404, deleteProxy: 404, deleteWithoutCsrf: 403 });
    await page.goto(`${tps.url}/portal/waf/events/${eventIdOfA}`);
    await page.getByTestId('event-detail').getByText('does not exist').waitFor();
    assert.equal((await apiA.get(`${CONFIGS}/${seededConfigId}`)).status, 200, "A's proxy is still there");
  });

  it('throttles failed sign-ins per email and client IP', async () => {
    const attempt = (password: string) =>
      request(`${tps.url}/portal/api/login`, { method: 'POST', contentType: 'application/json', body: { email: userB.email, password } });
    for (let i = 0; i < 5; i++) assert.equal((await attempt('wrong password')).status, 401);
    const throttled = await attempt(userB.password);
    assert.equal(throttled.status, 429, 'even the right password waits once the limit is reached');
    assert.ok(Number(throttled.headers.get('retry-after')) > 0);
    assert.equal(throttled.body.errors[0].code, 'TOO_MANY_SIGN_IN_ATTEMPTS');
    // Another account from the same IP is not locked out by it.
    const other = await request(`${tps.url}/portal/api/login`, { method: 'POST', contentType: 'application/json', body: userA });
    assert.equal(other.status, 200);
  });
});
