/**
 * The control-plane HTTP server: the spec's REST API (JSON:API), the token issuer, the OpenAPI
 * document and its docs page. Route plugins in ./routes, one per resource; what they share is in
 * ./types.ts, their error codes in ./error-catalogue.ts. Health and metrics are operators' business
 * and live on their own listener (src/metrics-listener.ts), not here.
 */
import Fastify, { type FastifyInstance, type FastifyError, type FastifyReply, type FastifyRequest } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import rateLimit from '@fastify/rate-limit';
import type { TSchema } from '@sinclair/typebox';
import { BearerError, OAuthError } from '../auth/token-issuer.ts';
import { ApiError, JSONAPI_MEDIA_TYPE, errorObject, validationErrors } from './jsonapi.ts';
import { apiErrorCodeSchema, type ApiErrorCode } from './error-catalogue.ts';
import { bodyAjv, queryAjv, isDocumentOnly, checkDocumentFrame } from './schemas/validator.ts';
import { ConflictError, NotFoundError } from '../store/errors.ts';
import { QuotaExceededError } from '../store/quotas.ts';
import { tokenRoutes } from './routes/oauth-token.ts';
import { trafficConfigRoutes } from './routes/traffic-configs.ts';
import { accountIpRoutes } from './routes/account-ips.ts';
import { certificateRoutes } from './routes/certificates.ts';
import { caCertificateRoutes } from './routes/ca-certificates.ts';
import { insightRoutes } from './routes/insight.ts';
import { ddosAttackRoutes } from './routes/ddos-attacks.ts';
import { portalRoutes, portalSessionPrincipal, loadedPortalSession } from './routes/portal.ts';
import { sourceKey } from '../net/source-key.ts';
import { ClientAddressPolicy } from '../net/client-address.ts';
import { CONNECTIONS_CHECKING_INTERVAL_MS, guardListener } from '../listener-guard.ts';
import { isRateLimitedBeforeBody } from './rate-limit-before-body.ts';
import type { ApiDeps } from './types.ts';

export async function buildApiServer(deps: ApiDeps): Promise<FastifyInstance> {
  const { settings } = deps;
  const app = Fastify({
    logger: {
      level: settings.logLevel,
      // Credentials never reach the log: neither headers that carry them nor any body (not logged at all).
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-csrf-token"]'], censor: '[redacted]' },
    },
    // A public listener's bounds (nginx's client_header_timeout, client_body_timeout,
    // keepalive_timeout, client_max_body_size): docs/decisions.md.
    bodyLimit: settings.apiBodyLimit,
    requestTimeout: settings.apiRequestTimeoutSeconds * 1000,
    keepAliveTimeout: settings.apiKeepAliveTimeoutSeconds * 1000,
    // Silence mid-exchange (a client that stops reading its response): a backstop past the request
    // timeout, which ends a request that is still coming in first (with a 408).
    connectionTimeout: settings.apiRequestTimeoutSeconds * 2000,
    http: {
      headersTimeout: settings.apiHeadersTimeoutSeconds * 1000,
      requestTimeout: settings.apiRequestTimeoutSeconds * 1000,
      connectionsCheckingInterval: CONNECTIONS_CHECKING_INTERVAL_MS,
    },
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
        error.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? 'a path segment is longer than any id this API knows'
          : 'the path is not a valid URL path';
      void reply
        .code(400)
        .type(JSONAPI_MEDIA_TYPE)
        .send({ errors: [errorObject('BAD_URL', detail)] });
    },
  });

  // Connection caps at accept, before Fastify or the HTTP parser sees the connection.
  const trustedProxies = ClientAddressPolicy.from({ trustedProxies: settings.apiTrustedProxies, listenerProxyProtocol: 'off' });
  const listener = guardListener(
    app.server,
    {
      listener: 'api',
      maxConnections: settings.apiMaxConnections,
      maxConnectionsPerSource: settings.apiMaxConnectionsPerSource,
      ipv6Prefix: settings.rateLimitIpv6Prefix,
      ...(trustedProxies !== undefined && { exemptFromSourceCap: (address: string) => trustedProxies.trusts(address) }),
      answerClientErrors: false,
    },
    deps.metrics,
  );

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
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `the body must be sent as Content-Type: ${JSONAPI_MEDIA_TYPE}`, {
        header: 'Content-Type',
      });
    }
    checkDocumentFrame(request.body);
  });

  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.apiRequests.inc({
      method: request.method,
      route: request.routeOptions.url ?? 'unknown',
      status: String(reply.statusCode),
    });
  });

  app.setErrorHandler((error, request, reply) => {
    const { status, body, headers } = toErrorResponse(error, request, settings.apiBodyLimit);
    if (error instanceof QuotaExceededError) deps.metrics.quotaExceeded.inc({ resource: error.resource });
    if ((error as FastifyError).code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      listener.refused('body', 'BODY_TOO_LARGE');
      // The rest of the body is not wanted: the connection ends with the answer instead of reading it.
      headers.Connection = 'close';
    }
    if (status >= 500) request.log.error({ err: error }, 'request failed');
    void reply
      .code(status)
      .headers(headers)
      .type(body.errors ? JSONAPI_MEDIA_TYPE : 'application/json')
      .send(body);
  });

  app.setNotFoundHandler((request, reply) => {
    void reply
      .code(404)
      .type(JSONAPI_MEDIA_TYPE)
      .send({ errors: [errorObject('NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}`)] });
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
          'Errors are JSON:API error objects with a `code` and a `source.pointer` or `source.parameter`. ' +
          'The schema ApiErrorCode lists every code with its HTTP status.',
      },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An access token from POST /oauth/token.' },
        },
        schemas: { ApiErrorCode: apiErrorCodeSchema() },
      },
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  // Every route is limited per minute: a call with a token per service account, a portal call per
  // signed-in user, and a call with neither (the token endpoint, sign-in, the docs, the portal's
  // files) per client address, at a lower rate: those are what a stranger can reach. Routes that
  // anyone may call with a body (the token endpoint, sign-in) are limited before it is read
  // (`config.rateLimit.hook = 'onRequest'`): a refused client's body is never waited for.
  await app.register(rateLimit, {
    global: true,
    hook: 'preHandler',
    timeWindow: 60_000,
    keyGenerator: (request: FastifyRequest) => rateLimitKey(request, settings.rateLimitIpv6Prefix),
    max: (request: FastifyRequest) =>
      rateLimitKey(request, settings.rateLimitIpv6Prefix).startsWith('ip:')
        ? settings.apiUnauthenticatedRateLimitPerMinute
        : settings.apiRateLimitPerMinute,
    errorResponseBuilder: (request, context) => {
      const key = rateLimitKey(request, settings.rateLimitIpv6Prefix);
      const kind = key.slice(0, key.indexOf(':'));
      deps.metrics.apiRateLimited.inc({ key: kind });
      const beforeBody = isRateLimitedBeforeBody(request);
      if (beforeBody) listener.refused('head', 'RATE_LIMIT');
      const per =
        kind === 'client' ? 'per service account' : kind === 'portal-user' ? 'per signed-in user' : 'per client address without a token';
      return new ApiError('TOO_MANY_REQUESTS', `at most ${context.max} API calls per minute ${per}`, undefined, {
        'Retry-After': String(Math.max(1, Math.ceil(context.ttl / 1000))),
        // Refused before its body: the connection ends with the answer, the body is not read.
        ...(beforeBody && { Connection: 'close' }),
      });
    },
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  // In this order in the OpenAPI document.
  for (const routes of [
    tokenRoutes,
    accountIpRoutes,
    trafficConfigRoutes,
    certificateRoutes,
    caCertificateRoutes,
    insightRoutes,
    ddosAttackRoutes,
    portalRoutes,
  ]) {
    await app.register(routes, { deps });
  }
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

function toErrorResponse(error: unknown, request: FastifyRequest, bodyLimit: number): ErrorResponse {
  const jsonApi = (code: ApiErrorCode, detail: string, headers: Record<string, string> = {}, status?: number): ErrorResponse => {
    const error = errorObject(code, detail, undefined, status);
    return { status: Number(error.status), body: { errors: [error] }, headers };
  };
  if (error instanceof ApiError) return { status: error.status, body: { errors: error.errors }, headers: error.headers };
  if (error instanceof OAuthError) {
    return {
      status: error.status,
      body: { error: error.error, error_description: error.message },
      headers: { 'Cache-Control': 'no-store' },
    };
  }
  if (error instanceof BearerError) {
    return jsonApi(error.status === 401 ? 'UNAUTHORIZED' : 'INSUFFICIENT_SCOPE', error.message, {
      'WWW-Authenticate': error.wwwAuthenticate,
    });
  }
  if (error instanceof NotFoundError) return jsonApi('NOT_FOUND', error.message);
  if (error instanceof ConflictError) {
    // Every code of ConflictCode but EMAIL_TAKEN, which no route can meet, is in the catalogue (error-catalogue.test.ts).
    return {
      status: 409,
      body: {
        errors: [errorObject(error.code as ApiErrorCode, error.message, error.pointer ? { pointer: error.pointer } : undefined, 409)],
      },
      headers: {},
    };
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    const location =
      fastifyError.validationContext === 'body' ? 'body' : fastifyError.validationContext === 'params' ? 'params' : 'querystring';
    const errors = validationErrors(fastifyError.validation as Parameters<typeof validationErrors>[0], location);
    if (request.url.includes('/oauth/token')) {
      return { status: 400, body: { error: 'invalid_request', error_description: String(errors[0]?.detail) }, headers: {} };
    }
    return { status: location === 'body' ? 422 : 400, body: { errors }, headers: {} };
  }
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return jsonApi('UNSUPPORTED_MEDIA_TYPE', `Content-Type ${request.headers['content-type'] ?? '(none)'} is not supported here`);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return jsonApi('MALFORMED_BODY', 'the body is empty');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return jsonApi('MALFORMED_BODY', 'the body is not valid JSON');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return jsonApi('BODY_TOO_LARGE', `the body is larger than ${bodyLimit} bytes (the API's limit)`);
  }
  if (error instanceof SyntaxError || fastifyError.statusCode === 400) {
    return jsonApi('MALFORMED_BODY', 'the body is not valid JSON');
  }
  if (fastifyError.statusCode && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500) {
    return jsonApi('BAD_REQUEST', fastifyError.message, {}, fastifyError.statusCode);
  }
  return jsonApi('INTERNAL_ERROR', 'the service failed to handle this request; it has been logged');
}
