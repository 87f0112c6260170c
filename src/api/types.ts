/**
 * What the API's modules share: the services a route plugin is given, the request fields and route
 * options the server's hooks read, and the type of a route plugin. Types only, so that the server,
 * the route plugins and their helpers import it without importing each other.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Store } from '../store/index.ts';
import type { Settings } from '../config/settings.ts';
import type { Principal, TokenIssuer } from '../auth/token-issuer.ts';
import type { Metrics } from '../metrics.ts';
import type { Scope } from '../store/service-accounts.ts';
import type { SecretBox } from '../certs/secret-box.ts';
import type { AcmeService } from '../certs/acme.ts';
import type { OriginPolicy } from '../net/origin-policy.ts';

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

/**
 * A module of routes: a Fastify plugin given the API's services. Its routes take their request
 * types (`request.body`, `params`, `query`) from their TypeBox schemas. `deps` is passed whole, never
 * copied: some of its fields are getters that change once the listeners are bound.
 */
export type RoutePlugin = FastifyPluginAsyncTypebox<{ deps: ApiDeps }>;

/** The Fastify instance a route plugin adds its routes to. */
export type RouteInstance = Parameters<RoutePlugin>[0];

declare module 'fastify' {
  interface FastifyRequest {
    /** Who calls: set by the server's auth hook on routes with a `scope`. */
    principal?: Principal;
  }
  interface FastifyContextConfig {
    /** The scope a route needs; routes without one are public (token endpoint, docs, health). */
    scope?: Scope;
    /** Write routes whose body must be a JSON:API document (`application/vnd.api+json`). */
    jsonApiBody?: boolean;
    /** Portal endpoints that work without a session (sign-in, session probe). */
    portalPublic?: boolean;
  }
}
