/**
 * A distributed application-layer flood against a started `tps serve` with two proxy workers:
 * 1,000 sources of 127.0.0.0/8, each under the per-source rate limit, together far over the
 * proxy's threshold. The attack is detected across the workers, unverified clients get the
 * challenge and none of their requests reaches the origin, a headless Chromium solves the challenge
 * and is served, an exempted API path keeps answering, a source that keeps ignoring the challenge
 * is blocked, forged, expired and other-proxy clearances are refused, and once the flood stops the
 * episode is listed by GET /api/v2/insight/ddos-attacks with its figures (and in the insight export).
 *
 * Light on CPU: a threshold of 30 requests/s, 8-bit challenges, and a background flood of about a
 * hundred requests a second while the browser works. Bounded loops, no timing assertions.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { SecretBox } from '../../src/certs/secret-box.ts';
import { CLEARANCE_COOKIE, ClearanceKeys, clearanceNetwork, leadingZeroBits } from '../../src/edge/http/app-ddos/clearance.ts';
import { TenantApi } from '../support/api-client.ts';
import { type Browser, launchBrowser } from '../support/browser.ts';
import { freePort } from '../support/ports.ts';
import { createTenant, REPO_ROOT, startTps, type Tps } from '../support/tps.ts';
import { waitFor } from '../support/wait.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const ATTACKS = '/api/v2/insight/ddos-attacks';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.0.95';
const ORIGIN = '127.0.0.96';
const SOURCES = Array.from({ length: 1000 }, (_, i) => `127.1.${Math.floor(i / 250)}.${(i % 250) + 1}`);
const THRESHOLD = 30;
const ORIGIN_RATE_LIMIT = 40;
const MAX_UNSOLVED = 6;
const BITS = 8;

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request on a connection of its own from `localAddress`. */
function get(url: string, localAddress: string, headers: Record<string, string> = {}, agent?: http.Agent): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const options = { localAddress, agent: agent ?? false, headers: { 'user-agent': 'flood/1', ...headers } };
    const request = http.get(url, options, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
    });
    request.on('error', reject);
    request.setTimeout(15_000, () => request.destroy(new Error('timeout')));
  });
}

const isChallenge = (reply: Reply) => reply.status === 503 && reply.headers['tps-mitigated'] === 'challenge';

/** Runs `tasks` with at most `concurrency` at once. */
async function pool<T>(tasks: (() => Promise<T>)[], concurrency: number): Promise<T[]> {
  const results: T[] = new Array(tasks.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < tasks.length) {
        const index = next++;
        results[index] = await tasks[index]!();
      }
    }),
  );
  return results;
}

/** Solves a challenge page as a browser would (the same hash, in Node), and returns the clearance cookie. */
async function solvePage(base: string, page: Reply, localAddress: string): Promise<string> {
  const challenge = /data-challenge="([^"]+)"/.exec(page.body)?.[1];
  const bits = Number(/data-bits="(\d+)"/.exec(page.body)?.[1]);
  assert.ok(challenge !== undefined && bits > 0, 'the page carries a challenge');
  let counter = 0;
  while (leadingZeroBits(createHash('sha256').update(`${challenge}:${counter}`).digest()) < bits) counter++;
  const answer = await get(`${base}/.well-known/tps-challenge?c=${encodeURIComponent(challenge)}&n=${counter}&r=%2F`, localAddress);
  assert.equal(answer.status, 302, answer.body);
  const cookie = (answer.headers['set-cookie'] ?? [])[0] ?? '';
  assert.match(cookie, /^tps_clearance=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax/);
  return cookie.split(';')[0]!;
}

describe('distributed application-layer flood', () => {
  let tps: Tps;
  let origin: http.Server;
  let browser: Browser | undefined;
  /** Requests the origin received, by path, and those of the flood. */
  const originHits = { flood: 0, total: 0, withClearance: 0, api: 0 };

  before(async () => {
    origin = http.createServer((request, response) => {
      originHits.total++;
      if (request.url?.startsWith('/flood')) originHits.flood++;
      if (request.url?.startsWith('/api/')) originHits.api++;
      if (request.headers.cookie?.includes(`${CLEARANCE_COOKIE}=`)) originHits.withClearance++;
      response.setHeader('content-type', 'text/html');
      response.end(`<!doctype html><title>origin</title><p id="origin">origin ${request.url}</p>`);
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_APP_DDOS_QUIET_SECONDS: '3',
        TPS_APP_DDOS_CHALLENGE_BITS: String(BITS),
        TPS_APP_DDOS_MAX_UNSOLVED: String(MAX_UNSOLVED),
        TPS_APP_DDOS_BLOCK_SECONDS: '120',
      },
    });
  });

  after(async () => {
    await browser?.close();
    await tps?.stop();
    origin?.close();
  });

  it('detects it, challenges unverified clients, serves a browser that solved, and reports the episode', async () => {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const originPort = (origin.address() as { port: number }).port;
    const create = async (port: number, appDdos: object) => {
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'httpProxy',
          attributes: {
            frontend: { ipv4: FRONTEND, port },
            backend: { hosts: [{ address: ORIGIN, port: originPort }] },
            rateLimiting: { thresholds: [{ requests: 20, periodSeconds: 10 }], blockSeconds: 120 },
            appDdos,
          },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      return created.body.data as { id: string; attributes: { appDdos: Record<string, unknown> } };
    };
    const port = await freePort(FRONTEND);
    const proxy = await create(port, {
      mode: 'AUTO',
      threshold: THRESHOLD,
      originRateLimit: ORIGIN_RATE_LIMIT,
      exemptions: { pathPrefixes: ['/api/'] },
    });
    // Defaults filled in, and documented validation.
    assert.deepEqual(proxy.attributes.appDdos.exemptions, { pathPrefixes: ['/api/'], userAgents: [], sourceNetworks: [] });
    const otherPort = await freePort(FRONTEND);
    const other = await create(otherPort, { mode: 'ALWAYS' });
    const invalid = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port: await freePort(FRONTEND) },
          backend: { hosts: [{ address: ORIGIN, port: originPort }] },
          appDdos: { mode: 'SOMETIMES', exemptions: { sourceNetworks: ['10.0.0.0/99'] } },
        },
      },
    });
    assert.equal(invalid.status, 422, JSON.stringify(invalid.body));
    assert.ok(
      (invalid.body.errors as { source?: { pointer?: string } }[]).some((error) =>
        error.source?.pointer?.startsWith('/data/attributes/appDdos'),
      ),
      JSON.stringify(invalid.body),
    );
    for (const id of [proxy.id, other.id]) {
      await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
        timeoutMs: 20_000,
      });
    }
    const base = `http://${FRONTEND}:${port}`;

    // Before any flood: served normally.
    assert.equal((await get(`${base}/flood/calm`, SOURCES[0]!)).status, 200);

    // The flood: round after round, every source sends one request (at most 8 each, under the
    // per-source limit of 20 in 10 s), until a whole round is challenged.
    let rounds = 0;
    let firstChallenge: Reply | undefined;
    let quietRoundOriginHits = -1;
    for (; rounds < 8; rounds++) {
      const before = originHits.flood;
      const replies = await pool(
        SOURCES.map((source) => () => get(`${base}/flood/${rounds}`, source)),
        24,
      );
      assert.equal(replies.filter((reply) => reply.status === 429).length, 0, 'no source is over its rate limit');
      firstChallenge ??= replies.find(isChallenge);
      if (replies.every(isChallenge)) {
        quietRoundOriginHits = originHits.flood - before;
        break;
      }
    }
    assert.ok(firstChallenge, `the attack was detected within ${rounds + 1} rounds`);
    // A whole round of 1,000 unverified requests during the attack: none reached the origin.
    assert.equal(quietRoundOriginHits, 0);
    // The page: no third-party resource, a <noscript> explanation, a CSP of its own.
    assert.match(firstChallenge.body, /<noscript>/);
    assert.doesNotMatch(firstChallenge.body, /(src|href)="https?:/);
    assert.match(String(firstChallenge.headers['content-security-policy']), /default-src 'none'; script-src 'sha256-/);
    assert.equal(firstChallenge.headers['cache-control'], 'no-store');

    // Keep the attack going (about 100 requests a second) while the rest runs.
    let flooding = true;
    const background = (async () => {
      let index = 0;
      while (flooding) {
        const batch = Array.from({ length: 20 }, () => SOURCES[index++ % SOURCES.length]!);
        await Promise.all(batch.map((source) => get(`${base}/flood/bg`, source).catch(() => undefined)));
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();
    try {
      // A browser solves the challenge and is then served normally.
      browser = await launchBrowser();
      const page = browser.page;
      const response = await page.goto(`${base}/welcome?x=1`);
      assert.ok(response);
      await page.locator('#origin').waitFor({ timeout: 30_000 });
      assert.equal(await page.locator('#origin').textContent(), 'origin /welcome?x=1');
      const cookies = await browser.context.cookies(base);
      const clearance = cookies.find((cookie) => cookie.name === CLEARANCE_COOKIE);
      assert.ok(clearance, 'the browser holds a clearance');
      assert.equal(clearance.httpOnly, true);
      const hitsBefore = originHits.withClearance;
      await page.goto(`${base}/next`);
      assert.equal(await page.locator('#origin').textContent(), 'origin /next');
      assert.ok(originHits.withClearance > hitsBefore);

      // The same clearance from the same network works from another client; forged, expired or
      // another proxy's are refused.
      const cookie = `${CLEARANCE_COOKIE}=${clearance.value}`;
      assert.equal((await get(`${base}/flood/cleared`, '127.0.0.1', { cookie })).status, 200);
      const [expires, period, mac] = clearance.value.split('.');
      const forged = `${CLEARANCE_COOKIE}=${expires}.${period}.${mac!.slice(0, -2)}${mac!.endsWith('AA') ? 'BB' : 'AA'}`;
      assert.ok(isChallenge(await get(`${base}/flood/forged`, '127.0.0.1', { cookie: forged })), 'forged cookie refused');
      // Another network (127.0.1.0/24 rather than 127.0.0.0/24).
      assert.ok(isChallenge(await get(`${base}/flood/moved`, '127.0.1.1', { cookie })), 'cookie from another network refused');
      // Signed with the service's key (derived from its master key, as the edge does), but expired.
      const keys = new ClearanceKeys(
        SecretBox.fromSettings({ masterKey: undefined, dataDir: tps.env.TPS_DATA_DIR! }).derive('app-ddos clearance'),
        1800,
      );
      const now = Math.floor(Date.now() / 1000);
      const fresh = `${CLEARANCE_COOKIE}=${keys.clearance(proxy.id, clearanceNetwork('127.0.0.1'), now)}`;
      assert.equal(
        (await get(`${base}/flood/minted`, '127.0.0.1', { cookie: fresh })).status,
        200,
        'a cookie minted like the edge does passes',
      );
      const expired = `${CLEARANCE_COOKIE}=${keys.clearance(proxy.id, clearanceNetwork('127.0.0.1'), now - 1900)}`;
      assert.ok(isChallenge(await get(`${base}/flood/expired`, '127.0.0.1', { cookie: expired })), 'expired cookie refused');
      // The other proxy (ALWAYS: it challenges without an attack) gives its own clearance: refused here.
      const otherBase = `http://${FRONTEND}:${otherPort}`;
      const otherPage = await get(`${otherBase}/`, '127.0.0.1');
      assert.ok(isChallenge(otherPage), 'ALWAYS mode challenges without an attack');
      const otherCookie = await solvePage(otherBase, otherPage, '127.0.0.1');
      assert.equal((await get(`${otherBase}/`, '127.0.0.1', { cookie: otherCookie })).status, 200);
      assert.ok(isChallenge(await get(`${base}/flood/other`, '127.0.0.1', { cookie: otherCookie })), "another proxy's cookie refused");

      // A wrong solution gets a fresh challenge, no cookie.
      const wrong = await get(`${base}/.well-known/tps-challenge?c=${encodeURIComponent('1.8.x.y')}&n=1&r=%2F`, '127.0.0.1');
      assert.ok(isChallenge(wrong));
      assert.equal(wrong.headers['set-cookie'], undefined);

      // The exempted API path answers its client (no JavaScript) during the attack.
      const apiReply = await get(`${base}/api/status`, '127.2.0.1');
      assert.equal(apiReply.status, 200);
      assert.equal(apiReply.body.includes('origin /api/status'), true);
      // ...but not a path that only looks like it.
      assert.ok(isChallenge(await get(`${base}/api/../admin`, '127.2.0.1')));

      // Cleared clients together stay under originRateLimit per second; the rest is shed (503, Retry-After).
      // Twenty clients of the cleared network, each under its rate limit, over kept-alive connections.
      const agents = Array.from(
        { length: 20 },
        (_, i) => new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: `127.0.0.${10 + i}` }),
      );
      const burstStarted = Date.now();
      const burst = await pool(
        Array.from(
          { length: 120 },
          (_, i) => () => get(`${base}/flood/burst/${i}`, `127.0.0.${10 + (i % 20)}`, { cookie }, agents[i % 20]),
        ),
        20,
      );
      for (const agent of agents) agent.destroy();
      const seconds = Math.ceil((Date.now() - burstStarted) / 1000) + 1;
      const passed = burst.filter((reply) => reply.status === 200).length;
      const shed = burst.filter((reply) => reply.status === 503 && reply.headers['retry-after'] === '1');
      assert.equal(passed + shed.length, burst.length, JSON.stringify(burst.map((reply) => reply.status)));
      assert.ok(passed <= ORIGIN_RATE_LIMIT * seconds, `${passed} passed in ${seconds} s`);

      // A browser's subresource requests (an open page reloading its images) are challenged but never get it blocked.
      const images: number[] = [];
      for (let i = 0; i < MAX_UNSOLVED + 2; i++) {
        images.push((await get(`${base}/flood/image.png`, '127.3.0.2', { 'sec-fetch-dest': 'image' })).status);
      }
      assert.deepEqual(images, new Array(MAX_UNSOLVED + 2).fill(503));

      // A source that keeps asking without solving is blocked, in the rate limiter too.
      const stubborn = '127.3.0.1';
      const statuses: number[] = [];
      for (let i = 0; i < MAX_UNSOLVED + 2; i++) statuses.push((await get(`${base}/flood/stubborn`, stubborn)).status);
      assert.deepEqual(statuses.slice(0, MAX_UNSOLVED), new Array(MAX_UNSOLVED).fill(503));
      assert.deepEqual(statuses.slice(MAX_UNSOLVED), [429, 429]);
      // Even with a clearance now: the block holds.
      assert.equal((await get(`${base}/api/status`, stubborn)).status, 429);
    } finally {
      flooding = false;
      await background;
    }

    // The flood stopped: the episode ends (3 quiet seconds) and is listed with its figures.
    const listed = await waitFor(
      'the attack to be listed',
      async () => {
        const answer = await api.get(`${ATTACKS}?filter[tenantId]=${api.tenantId}`);
        assert.equal(answer.status, 200, JSON.stringify(answer.body));
        return answer.body.data.length > 0 && answer.body;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    assert.equal(listed.data.length, 1, JSON.stringify(listed.data));
    const attack = listed.data[0];
    assert.equal(attack.type, 'ddosAttack');
    assert.equal(attack.relationships.trafficConfig.data.id, proxy.id);
    assert.equal(attack.relationships.belongsTo.data.id, api.tenantId);
    const figures = attack.attributes;
    assert.equal(figures.mode, 'AUTO');
    assert.equal(figures.triggerRate, THRESHOLD);
    assert.ok(figures.peakRate > THRESHOLD, JSON.stringify(figures));
    assert.ok(figures.sources >= SOURCES.length, JSON.stringify(figures));
    assert.ok(figures.challenged >= SOURCES.length, JSON.stringify(figures));
    assert.ok(figures.solved >= 1, JSON.stringify(figures));
    assert.ok(figures.passed >= 3, JSON.stringify(figures));
    // The stubborn source's request that tripped the block; after it the rate limiter refuses the source (its own episode).
    assert.ok(figures.blocked >= 1, JSON.stringify(figures));
    assert.ok(figures.requests >= figures.challenged + figures.passed + figures.blocked, JSON.stringify(figures));
    assert.ok(Date.parse(figures.endedAt) > Date.parse(figures.startedAt));
    // The challenge pages of the attack showed its support id.
    assert.ok(firstChallenge.body.includes(`Support ID: ${figures.supportId}`), "the page shows the attack's support id");
    assert.equal(listed.links.next, `${ATTACKS}?filter[tenantId]=${api.tenantId}&page[after]=${attack.id}&page[size]=100`);
    // The same attack in the insight export, as one APP_DDOS_ATTACK event with action CHALLENGED.
    const events = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=APP_DDOS_ATTACK&page[size]=1000`);
    const challenged = (events.body.data as { id: string; attributes: { action: string; attack?: unknown } }[]).filter(
      (event) => event.attributes.action === 'CHALLENGED',
    );
    assert.deepEqual(
      challenged.map((event) => event.id),
      [attack.id],
    );
    // Another tenant sees none of it.
    const stranger = await TenantApi.connect(tps, await createTenant(tps));
    assert.equal((await stranger.get(ATTACKS)).body.data.length, 0);
    assert.equal((await stranger.get(`${ATTACKS}?filter[tenantId]=${api.tenantId}`)).status, 403);

    // The OpenAPI document shows the attributes and the endpoint.
    const openapi = JSON.stringify(await (await fetch(`${tps.url}/openapi.json`)).json());
    assert.match(openapi, /"appDdos"/);
    assert.match(openapi, /\/api\/v2\/insight\/ddos-attacks/);

    // The portal lists it, with how to switch the protection on.
    if (!fs.existsSync(path.join(REPO_ROOT, 'src/portal/dist/index.html'))) {
      execFileSync('npm', ['run', '--silent', 'build:portal'], { cwd: REPO_ROOT, stdio: 'inherit' });
    }
    await tps.cli('user', 'create', '--tenant', api.tenantId, '--email', 'ops@flood.example', '--password', 'flood-password');
    const page = browser!.page;
    await page.goto(`${tps.url}/portal/`);
    await page.locator('#email').fill('ops@flood.example');
    await page.locator('#password').fill('flood-password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('signed-in-as').waitFor();
    await page.getByTestId('nav DDoS attacks').click();
    await page.locator(`tr[data-attack-id="${attack.id}"]`).waitFor();
    assert.match((await page.getByTestId('ddos-help').textContent()) ?? '', /pathPrefixes/);
    // The proxy form shows the protection's settings.
    await page.locator(`tr[data-attack-id="${attack.id}"] a`).click();
    await page.locator('select[name="appDdosMode"]').waitFor();
    assert.equal(await page.locator('select[name="appDdosMode"]').inputValue(), 'AUTO');
    assert.equal(await page.locator('input[name="appDdosPaths"]').inputValue(), '/api/');

    // Counted on /metrics.
    const metrics = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
    const lines = metrics
      .split('\n')
      .filter((line) => line.startsWith('tps_edge_app_ddos_requests_total{') && line.includes(`proxy="${proxy.id}"`));
    for (const outcome of ['challenged', 'solved', 'cleared', 'exempt', 'blocked', 'failed']) {
      assert.ok(
        lines.some((line) => line.includes(`outcome="${outcome}"`) && Number(line.split(' ').at(-1)) > 0),
        `${outcome} counted: ${lines.join('; ')}`,
      );
    }
    for (const event of ['started', 'ended']) {
      assert.ok(
        metrics
          .split('\n')
          .some(
            (line) =>
              line.startsWith('tps_edge_app_ddos_attacks_total{') &&
              line.includes(`proxy="${proxy.id}"`) &&
              line.includes(`event="${event}"`) &&
              line.endsWith(' 1'),
          ),
        `attack ${event} counted once`,
      );
    }
  });
});
