/**
 * The control-plane HTTP server: the spec's REST API (JSON:API), the token issuer, the OpenAPI
 * document and its docs page. Route modules in ./routes, one per resource. Health and metrics are
 * operators' business and live on their own listener (src/metrics-listener.ts), not here.
 */
import Fastify, { type FastifyInstance, type FastifyError, type FastifyReply, type FastifyRequest } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import rateLimit from '@fastify/rate-limit';
import type { TSchema } from '@sinclair/typebox';
import type { Store } from '../store/index.ts';
import type { Settings } from '../config/settings.ts';
import { BearerError, OAuthError, type Principal, type TokenIssuer } from '../auth/token-issuer.ts';
import { ApiError, JSONAPI_MEDIA_TYPE, errorObject, validationErrors } from './jsonapi.ts';
import { bodyAjv, queryAjv, isDocumentOnly, checkDocumentFrame } from './schemas/validator.ts';
import { ConflictError, NotFoundError } from '../store/errors.ts';
import { QuotaExceededError } from '../store/quotas.ts';
import type { Metrics } from '../metrics.ts';
import type { Scope } from '../store/service-accounts.ts';
import { registerTokenRoutes } from './routes/oauth-token.ts';
import { registerTrafficConfigRoutes } from './routes/traffic-configs.ts';
import { registerAccountIpRoutes } from './routes/account-ips.ts';
import { registerCertificateRoutes } from './routes/certificates.ts';
import { registerCaCertificateRoutes } from './routes/ca-certificates.ts';
import { registerInsightRoutes } from './routes/insight.ts';
import { registerPortalRoutes, portalSessionPrincipal, loadedPortalSession } from './routes/portal.ts';
import type { SecretBox } from '../certs/secret-box.ts';
import { sourceKey } from '../edge/net/source-key.ts';
import type { AcmeService } from '../certs/acme.ts';
import type { OriginPolicy } from '../edge/net/origin-policy.ts';

/** The addresses the service is known by; filled in once the listener's port is known. */
export interface PublicUrls {
  baseUrl: string;
  authUrl: string;
}

export interface ApiDeps {
  settings: Settings;
  store: Store;
  tokens: TokenIssuer;
  secrets: SecretBox;
  metrics: Metrics;
  urls: PublicUrls;
  /** The ACME service, when this process runs one: the certificate routes hand it new work. */
  acme?: Pick<AcmeService, 'enqueue' | 'renewNow'> | undefined;
  /**
   * Where the service may connect on a tenant's behalf: literal origin addresses and crlUrls are
   * checked against it. Undefined until the listeners are bound (their ports are part of it);
   * writes that need it answer 503 until then.
   */
  readonly originPolicy: OriginPolicy | undefined;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
  interface FastifyContextConfig {
    /** The scope a route needs; routes without one are public (token endpoint, docs, health). */
    scope?: Scope;
    /** Write routes whose body must be a JSON:API document (`application/vnd.api+json`). */
    jsonApiBody?: boolean;
  }
}

export async function buildApiServer(deps: ApiDeps): Promise<FastifyInstance> {
  const { settings } = deps;
  const app = Fastify({
    logger: {
      level: settings.logLevel,
      // Credentials never reach the log: neither headers that carry them nor any body (not logged at all).
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-csrf-token"]'], censor: '[redacted]' },
    },
    bodyLimit: 1024 * 1024,
    // The edge's own connections and the API share nothing; trust no forwarding header unless the
    // operator names the reverse proxies in front of the API (TPS_API_TRUSTED_PROXIES).
    trustProxy: settings.apiTrustedProxies.length > 0 ? settings.apiTrustedProxies : false,
    ajv: { customOptions: {} },
    routerOptions: { ignoreTrailingSlash: true },
    // What the router refuses before any route runs (a malformed or overlong path) is a JSON:API error too.
    frameworkErrors: (error, _request, frameworkReply) => {
      // Typed for the server's generic reply before the instance exists; the plain reply is what it is.
      const reply = frameworkReply as unknown as FastifyReply;
      const detail =
        error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'a path segment is longer than any id this API knows' : 'the path is not a valid URL path';
      void reply.code(400).type(JSONAPI_MEDIA_TYPE).send({ errors: [errorObject(400, 'BAD_URL', detail)] });
    },
  });

  app.setValidatorCompiler(({ schema, httpPart }) => {
    if (isDocumentOnly(schema)) return () => true;
    const ajv = httpPart === 'body' ? bodyAjv : queryAjv;
    return ajv.compile(schema as TSchema);
  });
  // Responses are documented by schemas but written as they are: a schema must never silently drop a field.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  const jsonParser = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser(JSONAPI_MEDIA_TYPE, { parseAs: 'string' }, jsonParser);
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(String(body))));
  });

  app.addHook('onRequest', async (request, reply) => {
    const scope = request.routeOptions.config.scope;
    if (!scope) return;
    // A portal session (cookie + CSRF token) when there is no Authorization header; see routes/portal.ts.
    request.principal = (await portalSessionPrincipal(deps, request)) ?? (await deps.tokens.authenticate(request.headers.authorization));
    if (!request.principal.scopes.has(scope)) {
      throw new BearerError(403, 'insufficient_scope', `this call needs the "${scope}" scope`);
    }
    void reply;
  });

  app.addHook('preValidation', async (request) => {
    if (!request.routeOptions.config.jsonApiBody) return;
    const mediaType = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (mediaType !== JSONAPI_MEDIA_TYPE) {
      throw new ApiError(415, 'UNSUPPORTED_MEDIA_TYPE', `the body must be sent as Content-Type: ${JSONAPI_MEDIA_TYPE}`, {
        header: 'Content-Type',
      });
    }
    checkDocumentFrame(request.body);
  });

  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.apiRequests.inc({ method: request.method, route: request.routeOptions.url ?? 'unknown', status: String(reply.statusCode) });
  });

  app.setErrorHandler((error, request, reply) => {
    const { status, body, headers } = toErrorResponse(error, request);
    if (error instanceof QuotaExceededError) deps.metrics.quotaExceeded.inc({ resource: error.resource });
    if (status >= 500) request.log.error({ err: error }, 'request failed');
    void reply.code(status).headers(headers).type(body.errors ? JSONAPI_MEDIA_TYPE : 'application/json').send(body);
  });

  app.setNotFoundHandler((request, reply) => {
    void reply
      .code(404)
      .type(JSONAPI_MEDIA_TYPE)
      .send({ errors: [errorObject(404, 'NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}`)] });
  });

  // JSON:API routes say so in the OpenAPI document too (added before swagger collects the routes).
  app.addHook('onRoute', (route) => {
    if (!route.config?.jsonApiBody || !route.schema) return;
    Object.assign(route.schema, { consumes: [JSONAPI_MEDIA_TYPE], produces: [JSONAPI_MEDIA_TYPE] });
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Traffic Protection Service API',
        version: '2.0.0',
        description:
          'Layer 4 and HTTP proxies with WAF, rate limiting, geo fencing, TLS and mutual TLS. ' +
          'Errors are JSON:API error objects with a `code` and a `source.pointer` or `source.parameter`.',
      },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An access token from POST /oauth/token.' },
        },
      },
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  // Every route is limited per minute: a call with a token per service account, a portal call per
  // signed-in user, and a call with neither (the token endpoint, sign-in, the docs, the portal's
  // files) per client address, at a lower rate: those are what a stranger can reach.
  await app.register(rateLimit, {
    global: true,
    hook: 'preHandler',
    timeWindow: 60_000,
    keyGenerator: (request: FastifyRequest) => rateLimitKey(request, settings.rateLimitIpv6Prefix),
    max: (request: FastifyRequest) => (rateLimitKey(request, settings.rateLimitIpv6Prefix).startsWith('ip:') ? settings.apiUnauthenticatedRateLimitPerMinute : settings.apiRateLimitPerMinute),
    errorResponseBuilder: (request, context) => {
      const key = rateLimitKey(request, settings.rateLimitIpv6Prefix);
      const kind = key.slice(0, key.indexOf(':'));
      deps.metrics.apiRateLimited.inc({ key: kind });
      const per = kind === 'client' ? 'per service account' : kind === 'portal-user' ? 'per signed-in user' : 'per client address without a token';
      return new ApiError(429, 'TOO_MANY_REQUESTS', `at most ${context.max} API calls per minute ${per}`, undefined, {
        'Retry-After': String(Math.max(1, Math.ceil(context.ttl / 1000))),
      });
    },
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  registerTokenRoutes(app, deps);
  registerAccountIpRoutes(app, deps);
  registerTrafficConfigRoutes(app, deps);
  registerCertificateRoutes(app, deps);
  registerCaCertificateRoutes(app, deps);
  registerInsightRoutes(app, deps);
  registerPortalRoutes(app, deps);
  return app;
}

/** Who a call counts against: its service account, its portal user, or (neither) its address. */
function rateLimitKey(request: FastifyRequest, ipv6Prefix: number): string {
  const principal = request.principal;
  if (principal !== undefined) return principal.clientId.startsWith('portal-user:') ? principal.clientId : `client:${principal.clientId}`;
  const session = loadedPortalSession(request);
  if (session !== undefined) return `portal-user:${session.userId}`;
  return `ip:${sourceKey(request.ip, ipv6Prefix)}`;
}

interface ErrorResponse {
  status: number;
  body: { errors?: unknown[]; error?: string; error_description?: string };
  headers: Record<string, string>;
}

function toErrorResponse(error: unknown, request: FastifyRequest): ErrorResponse {
  const jsonApi = (status: number, code: string, detail: string, headers: Record<string, string> = {}): ErrorResponse => ({
    status,
    body: { errors: [errorObject(status, code, detail)] },
    headers,
  });
  if (error instanceof ApiError) return { status: error.status, body: { errors: error.errors }, headers: error.headers };
  if (error instanceof OAuthError) {
    return { status: error.status, body: { error: error.error, error_description: error.message }, headers: { 'Cache-Control': 'no-store' } };
  }
  if (error instanceof BearerError) {
    return jsonApi(error.status, error.status === 401 ? 'UNAUTHORIZED' : 'INSUFFICIENT_SCOPE', error.message, {
      'WWW-Authenticate': error.wwwAuthenticate,
    });
  }
  if (error instanceof NotFoundError) return jsonApi(404, 'NOT_FOUND', error.message);
  if (error instanceof ConflictError) {
    return {
      status: 409,
      body: { errors: [errorObject(409, error.code, error.message, error.pointer ? { pointer: error.pointer } : undefined)] },
      headers: {},
    };
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    const location = fastifyError.validationContext === 'body' ? 'body' : fastifyError.validationContext === 'params' ? 'params' : 'querystring';
    const errors = validationErrors(fastifyError.validation as Parameters<typeof validationErrors>[0], location);
    if (request.url.includes('/oauth/token')) {
      return { status: 400, body: { error: 'invalid_request', error_description: String(errors[0]?.detail) }, headers: {} };
    }
    return { status: location === 'body' ? 422 : 400, body: { errors }, headers: {} };
  }
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return jsonApi(415, 'UNSUPPORTED_MEDIA_TYPE', `Content-Type ${request.headers['content-type'] ?? '(none)'} is not supported here`);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return jsonApi(400, 'MALFORMED_BODY', 'the body is empty');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return jsonApi(400, 'MALFORMED_BODY', 'the body is not valid JSON');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return jsonApi(413, 'BODY_TOO_LARGE', 'the body is larger than 1 MiB');
  }
  if (error instanceof SyntaxError || fastifyError.statusCode === 400) {
    return jsonApi(400, 'MALFORMED_BODY', 'the body is not valid JSON');
  }
  if (fastifyError.statusCode && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500) {
    return jsonApi(fastifyError.statusCode, 'BAD_REQUEST', fastifyError.message);
  }
  return jsonApi(500, 'INTERNAL_ERROR', 'the service failed to handle this request; it has been logged');
}
