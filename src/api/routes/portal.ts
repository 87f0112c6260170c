/**
 * The portal (web UI) under /portal: its built files, and the few endpoints it needs besides the
 * public API: sign-in and sessions, the tenant's service accounts, and the dashboards'
 * aggregations (computed in the store, see src/store/insight-aggregates.ts).
 *
 * Sessions: a random 256-bit token in an HTTP-only, SameSite=Strict cookie (Secure, and named
 * with the __Host- prefix, when the base URL is https); only its hash is stored. Every
 * state-changing call made with the session must carry the session's CSRF token in
 * `X-CSRF-Token`. Failed sign-ins are throttled per email and client IP, and per client IP: an
 * attempt takes its place in the throttle before its password is hashed, so a burst of parallel
 * attempts cannot all be hashed; hashes run a few at a time (TPS_PASSWORD_HASH_CONCURRENCY) with a
 * short queue, and a sign-in that finds the queue full is answered 503 at once.
 *
 * How the portal calls the public API: the API's auth hook also accepts this session cookie
 * (portalSessionPrincipal below), so the browser never holds a bearer token that script could
 * read and leak. It applies only when a request carries no Authorization header, so API clients
 * keep exactly the bearer rules they had; with the cookie, writes need the CSRF token as well.
 * (The alternative, minting short-lived access tokens for sessions, would need a service account
 * per user behind every token and would put a bearer token within reach of page script.)
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyReply, FastifyRequest } from 'fastify';
import fastifyStatic from '@fastify/static';
import { Type } from '@sinclair/typebox';
import { Enum, INSIGHT_EVENT_TYPES, Uuid } from '@tps/model';
import type { ApiDeps, RoutePlugin } from '../types.ts';
import { ApiError, errorObject } from '../jsonapi.ts';
import { ConcurrencyGate, GateFullError } from '../concurrency-gate.ts';
import { toEventResource } from '../insight-event-resource.ts';
import { sourceKey } from '../../net/source-key.ts';
import type { Principal } from '../../auth/token-issuer.ts';
import { SCOPES, type Scope } from '../../store/service-accounts.ts';
import type { PortalSession } from '../../store/portal-users.ts';
import { BadCursorError, dashboardRange } from '../../store/insight-aggregates.ts';
import { RATE_LIMITED_BEFORE_BODY } from '../rate-limit-before-body.ts';

/** Sign-in works without a session, and its per-address rate limit runs before its body is read. */
const SIGN_IN = { portalPublic: true, ...RATE_LIMITED_BEFORE_BODY };

/** The built portal (`npm run build:portal`). */
export const PORTAL_DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../portal/dist');
const API = '/portal/api';
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** Longest range a dashboard aggregates. */
const MAX_RANGE_SECONDS = 92 * 86_400;

/** Security headers of the portal's pages: only its own scripts, styles and API; never framed. */
const PAGE_HEADERS = {
  'Content-Security-Policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'same-origin',
};

const isHttps = (deps: ApiDeps) => deps.urls.baseUrl.startsWith('https:');
const cookieName = (deps: ApiDeps) => (isHttps(deps) ? '__Host-tps_session' : 'tps_session');

function sessionCookie(deps: ApiDeps, value: string, maxAgeSeconds: number): string {
  return [
    `${cookieName(deps)}=${value}`,
    'Path=/',
    `Max-Age=${maxAgeSeconds}`,
    'HttpOnly',
    'SameSite=Strict',
    ...(isHttps(deps) ? ['Secure'] : []),
  ].join('; ');
}

function readCookie(request: FastifyRequest, name: string): string | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const index = part.indexOf('=');
    if (index > 0 && part.slice(0, index).trim() === name) return part.slice(index + 1).trim();
  }
  return undefined;
}

/** Whether the route the router matched is one of the portal's endpoints. */
function isPortalApi(request: FastifyRequest): boolean {
  return request.routeOptions.url?.startsWith(`${API}/`) === true;
}

const loaded = new WeakMap<FastifyRequest, PortalSession | null>();

/** The session a portal route already looked up for this request (no store call), if any. */
export function loadedPortalSession(request: FastifyRequest): PortalSession | undefined {
  return loaded.get(request) ?? undefined;
}

/** Sign-ins waiting for a hash, per hash that may run at once: a short wait, never a pile-up. */
const HASH_QUEUE_PER_SLOT = 8;

/** The live session of the request's cookie, looked up once per request. */
async function sessionOf(deps: ApiDeps, request: FastifyRequest): Promise<PortalSession | undefined> {
  if (loaded.has(request)) return loaded.get(request) ?? undefined;
  const token = readCookie(request, cookieName(deps));
  const session = token && /^[A-Za-z0-9_-]{43}$/.test(token) ? await deps.store.portalUsers.session(token) : undefined;
  loaded.set(request, session ?? null);
  return session;
}

function checkCsrf(request: FastifyRequest, session: PortalSession): void {
  const sent = request.headers['x-csrf-token'];
  if (typeof sent !== 'string' || sent !== session.csrfToken) {
    throw new ApiError('CSRF_TOKEN_INVALID', 'this call needs the X-CSRF-Token header of the signed-in session', {
      header: 'X-CSRF-Token',
    });
  }
}

/**
 * The API's auth hook asks this first: the principal of a portal session, for requests without
 * an Authorization header that carry a session cookie; undefined otherwise (then the bearer rules
 * apply unchanged). A signed-in user acts with every scope on their own tenant only.
 */
export async function portalSessionPrincipal(deps: ApiDeps, request: FastifyRequest): Promise<Principal | undefined> {
  if (request.headers.authorization !== undefined) return undefined;
  const session = await sessionOf(deps, request);
  if (!session) return undefined;
  // The spec's certificate upload is a GET with a body: it writes, so it needs the token too.
  if (!SAFE_METHODS.has(request.method) || request.routeOptions.config.scope === 'write') checkCsrf(request, session);
  return { tenantId: session.tenantId, clientId: `portal-user:${session.userId}`, scopes: new Set<Scope>(SCOPES) };
}

const Login = Type.Object(
  { email: Type.String({ minLength: 3, maxLength: 254 }), password: Type.String({ minLength: 1, maxLength: 1024 }) },
  { additionalProperties: false },
);
const NewServiceAccount = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 100 }),
    scopes: Type.Array(Enum(SCOPES), { minItems: 1, uniqueItems: true }),
  },
  { additionalProperties: false },
);
const EventType = Enum(INSIGHT_EVENT_TYPES, { default: 'WAF_EVENT' });
const RangeQuery = {
  type: EventType,
  configId: Type.Optional(Uuid),
  from: Type.Optional(Type.String({ format: 'date-time', description: 'Default: 24 hours before `to`.' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'Default: now.' })),
};
const DashboardQuery = Type.Object(
  { ...RangeQuery, limit: Type.Integer({ minimum: 1, maximum: 100, default: 10 }) },
  { additionalProperties: false },
);
const EventsQuery = Type.Object(
  {
    ...RangeQuery,
    ruleId: Type.Optional(Type.Integer({ minimum: 1, maximum: 999_999 })),
    sourceIp: Type.Optional(Type.String({ maxLength: 45 })),
    countryCode: Type.Optional(Type.String({ maxLength: 2 })),
    path: Type.Optional(Type.String({ maxLength: 2048 })),
    cursor: Type.Optional(Type.String({ maxLength: 512 })),
    size: Type.Integer({ minimum: 1, maximum: 200, default: 50 }),
  },
  { additionalProperties: false },
);

export const portalRoutes: RoutePlugin = async (portal, { deps }) => {
  const { store } = deps;
  const concurrency = deps.settings.passwordHashConcurrency;
  const passwordHashes = new ConcurrencyGate(concurrency, HASH_QUEUE_PER_SLOT * concurrency);

  // Every portal endpoint but sign-in needs a session; state-changing ones the CSRF token too.
  // Decided on the route the router matched, never on the raw URL: the router decodes the path
  // (`/portal/%61pi/session` matches `/portal/api/session`), a prefix test on the raw URL does not.
  portal.addHook('onRequest', async (request) => {
    if (!isPortalApi(request) || request.routeOptions.config.portalPublic) return;
    const session = await sessionOf(deps, request);
    if (!session) throw new ApiError('NOT_SIGNED_IN', 'sign in to the portal first');
    if (!SAFE_METHODS.has(request.method)) checkCsrf(request, session);
  });
  portal.addHook('onSend', async (request, reply) => {
    if (isPortalApi(request)) void reply.header('Cache-Control', 'no-store').header('X-Content-Type-Options', 'nosniff');
  });

  // The hook above loaded it; a handler reached without one fails closed, never with a 500.
  const session = (request: FastifyRequest) => {
    const current = loaded.get(request);
    if (!current) throw new ApiError('NOT_SIGNED_IN', 'sign in to the portal first');
    return current;
  };
  const describe = async (current: PortalSession) => ({
    user: { email: current.email, tenantId: current.tenantId, tenantName: (await store.tenants.get(current.tenantId))?.name ?? '' },
    csrfToken: current.csrfToken,
    expiresAt: new Date(current.expiresAt).toISOString(),
  });

  portal.post(`${API}/login`, { config: SIGN_IN, schema: { hide: true, body: Login } }, async (request, reply) => {
    // JSON only: a cross-site HTML form cannot send it without the browser asking first (CORS).
    if (!(request.headers['content-type'] ?? '').toLowerCase().startsWith('application/json')) {
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'sign in with Content-Type: application/json', { header: 'Content-Type' });
    }
    const { email, password } = request.body;
    // The attempt's place in the throttle first: it counts as a failure unless the password is right.
    // An IPv6 client counts by its prefix, as at the edge: one host has a whole /64 to rotate through.
    const client = sourceKey(request.ip, deps.settings.rateLimitIpv6Prefix);
    const { wait, attempt } = await store.portalUsers.reserveSignIn(email, client);
    if (wait > 0 || attempt === undefined) {
      deps.metrics.signInsRefused.inc({ reason: 'THROTTLED' });
      const seconds = Math.ceil(wait / 1000);
      throw new ApiError(
        'TOO_MANY_SIGN_IN_ATTEMPTS',
        `too many failed sign-ins: try again in ${Math.ceil(seconds / 60)} minutes`,
        undefined,
        {
          'Retry-After': String(seconds),
        },
      );
    }
    let user: Awaited<ReturnType<typeof store.portalUsers.authenticate>>;
    try {
      user = await passwordHashes.run(() => store.portalUsers.authenticate(email, password));
    } catch (error) {
      if (!(error instanceof GateFullError)) throw error;
      await store.portalUsers.signInAbandoned(attempt);
      deps.metrics.signInsRefused.inc({ reason: 'BUSY' });
      request.log.warn({ waiting: passwordHashes.waiting }, 'portal sign-in refused: the password hashing queue is full');
      throw new ApiError('SIGN_IN_BUSY', 'too many sign-ins at once: try again in a few seconds', undefined, { 'Retry-After': '2' });
    }
    if (!user) throw new ApiError('INVALID_CREDENTIALS', 'wrong email or password', { pointer: '/password' });
    await store.portalUsers.signInSucceeded(attempt);
    const opened = await store.portalUsers.openSession(user);
    request.log.info({ portalUser: user.id, tenantId: user.tenantId }, 'portal sign-in');
    void reply.header('Set-Cookie', sessionCookie(deps, opened.token, Math.floor((opened.session.expiresAt - Date.now()) / 1000)));
    return describe(opened.session);
  });

  portal.get(`${API}/session`, { schema: { hide: true } }, async (request) => describe(session(request)));

  portal.post(`${API}/logout`, { schema: { hide: true } }, async (request, reply) => {
    const token = readCookie(request, cookieName(deps));
    if (token) await store.portalUsers.closeSession(token);
    void reply.code(204).header('Set-Cookie', sessionCookie(deps, '', 0));
  });

  // ---- service accounts of the session's tenant -------------------------------------------
  const account = (a: { clientId: string; name: string; scopes: string[]; createdAt: string; revokedAt: string | null }) => ({
    clientId: a.clientId,
    name: a.name,
    scopes: a.scopes,
    createdAt: a.createdAt,
    revokedAt: a.revokedAt,
  });

  portal.get(`${API}/service-accounts`, { schema: { hide: true } }, async (request) => ({
    data: (await store.serviceAccounts.list(session(request).tenantId)).map(account),
  }));

  portal.post(`${API}/service-accounts`, { schema: { hide: true, body: NewServiceAccount } }, async (request, reply) => {
    const { name, scopes } = request.body;
    const created = await store.serviceAccounts.create(session(request).tenantId, name.trim(), scopes);
    request.log.info({ clientId: created.clientId, tenantId: created.tenantId }, 'service account created in the portal');
    void reply.code(201);
    // The secret exists nowhere else: this answer is the only time anyone sees it.
    return { data: { ...account(created), clientSecret: created.clientSecret } };
  });

  portal.delete(
    `${API}/service-accounts/:clientId`,
    { schema: { hide: true, params: Type.Object({ clientId: Uuid }) } },
    async (request) => {
      const { clientId } = request.params;
      const revoked = await store.serviceAccounts.revoke(session(request).tenantId, clientId);
      if (!revoked) throw new ApiError('NOT_FOUND', `service account ${clientId} does not exist`);
      return { data: account(revoked) };
    },
  );

  // ---- dashboards ---------------------------------------------------------------------------
  const rangeOf = (query: { from?: string | undefined; to?: string | undefined }) => {
    const to = query.to === undefined ? Date.now() / 1000 : Date.parse(query.to) / 1000;
    const from = query.from === undefined ? to - 86_400 : Date.parse(query.from) / 1000;
    if (!(from < to)) throw new ApiError('INVALID_RANGE', '`from` must be before `to`', { parameter: 'from' });
    if (to - from > MAX_RANGE_SECONDS) throw new ApiError('RANGE_TOO_LONG', 'a dashboard covers at most 92 days', { parameter: 'from' });
    return dashboardRange(from, to);
  };

  portal.get(`${API}/insight/dashboard`, { schema: { hide: true, querystring: DashboardQuery } }, async (request) => {
    const query = request.query;
    const range = rangeOf(query);
    const filter = {
      tenantId: session(request).tenantId,
      type: query.type,
      configId: query.configId,
      from: range.from,
      to: range.to,
    };
    const dashboard = await store.insightAggregates.dashboard(filter, range, query.limit);
    return {
      ...dashboard,
      range: { from: new Date(range.from * 1000).toISOString(), to: new Date(range.to * 1000).toISOString(), stepSeconds: range.step },
      series: dashboard.series.map((bucket) => ({ ...bucket, start: new Date(bucket.start * 1000).toISOString() })),
    };
  });

  portal.get(`${API}/insight/events`, { schema: { hide: true, querystring: EventsQuery } }, async (request) => {
    const query = request.query;
    const range = rangeOf(query);
    try {
      const page = await store.insightAggregates.events({
        tenantId: session(request).tenantId,
        type: query.type,
        configId: query.configId,
        from: range.from,
        to: range.to,
        ruleId: query.ruleId,
        sourceIp: query.sourceIp,
        countryCode: query.countryCode,
        path: query.path,
        cursor: query.cursor,
        size: query.size,
      });
      return { data: page.events.map(toEventResource), next: page.next };
    } catch (error) {
      if (error instanceof BadCursorError) throw new ApiError('UNKNOWN_CURSOR', error.message, { parameter: 'cursor' });
      throw error;
    }
  });

  portal.get(`${API}/insight/events/:id`, { schema: { hide: true, params: Type.Object({ id: Uuid }) } }, async (request) => {
    const { id } = request.params;
    const event = await store.insightAggregates.event(session(request).tenantId, id);
    if (!event) throw new ApiError('NOT_FOUND', `event ${id} does not exist`);
    return { data: toEventResource(event) };
  });

  // Unknown portal endpoints are JSON errors, never the page.
  portal.all(`${API}/*`, { config: { portalPublic: true }, schema: { hide: true } }, async (request, reply) => {
    void reply.code(404).send({ errors: [errorObject('NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}`)] });
  });

  // ---- the built UI: hashed assets cached for good, every other path gets the page --------
  const built = fs.existsSync(path.join(PORTAL_DIST, 'index.html'));
  if (built) {
    await portal.register(fastifyStatic, {
      root: path.join(PORTAL_DIST, 'assets'),
      prefix: '/portal/assets/',
      immutable: true,
      maxAge: '365d',
      index: false,
    });
  }
  const page = async (_request: FastifyRequest, reply: FastifyReply) => {
    void reply.headers(PAGE_HEADERS).header('Cache-Control', 'no-cache');
    if (!built) {
      return reply.code(503).type('text/plain').send('The portal is not built: run `npm run build:portal`, then restart tps.\n');
    }
    return reply.type('text/html; charset=utf-8').sendFile('index.html', PORTAL_DIST);
  };
  portal.get('/portal', { schema: { hide: true } }, page);
  portal.get('/portal/*', { schema: { hide: true } }, page);
};
