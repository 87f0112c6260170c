/** Prometheus metrics of one process, served at /metrics. */
import { Registry, Counter, Gauge, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  apiRequests: Counter<'method' | 'route' | 'status'>;
  edgeConfigs: Gauge<'type' | 'state'>;
  /** Service-issued certificate orders the API refused: DOMAIN_CLAIMED, QUOTA_EXCEEDED, ACME_DISABLED. */
  acmeOrdersRefused: Counter<'reason'>;
  quotaExceeded: Counter<'resource'>;
  /** Portal sign-ins refused before their password was checked: throttled, or the hashing queue full. */
  signInsRefused: Counter<'reason'>;
  /** API calls refused by the per-minute limits, by who was counted (client, portal-user, address). */
  apiRateLimited: Counter<'key'>;
}

export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'tps_' });
  return {
    registry,
    apiRequests: new Counter({
      name: 'tps_api_requests_total',
      help: 'Control-plane API requests by route and status.',
      labelNames: ['method', 'route', 'status'],
      registers: [registry],
    }),
    edgeConfigs: new Gauge({
      name: 'tps_edge_configs',
      help: 'Traffic configurations this edge node holds, by type and state (BINDING_REFUSED: its front-end binding is served by another configuration).',
      labelNames: ['type', 'state'],
      registers: [registry],
    }),
    acmeOrdersRefused: new Counter({
      name: 'tps_acme_orders_refused_total',
      help: 'Service-issued certificate orders refused by the API: a domain another tenant claims (DOMAIN_CLAIMED), the tenant at its pending-order quota (QUOTA_EXCEEDED), or no ACME service (ACME_DISABLED).',
      labelNames: ['reason'],
      registers: [registry],
    }),
    quotaExceeded: new Counter({
      name: 'tps_api_quota_exceeded_total',
      help: 'Creates refused because the tenant reached a quota (409 QUOTA_EXCEEDED), by resource.',
      labelNames: ['resource'],
      registers: [registry],
    }),
    signInsRefused: new Counter({
      name: 'tps_portal_sign_ins_refused_total',
      help: 'Portal sign-ins refused before the password was hashed: THROTTLED (failed attempts per email and IP, or per IP), BUSY (password hashing queue full).',
      labelNames: ['reason'],
      registers: [registry],
    }),
    apiRateLimited: new Counter({
      name: 'tps_api_rate_limited_total',
      help: 'API calls answered 429 by the per-minute limits, by what was counted: a service account (client), a portal user, or a client address (calls without a token or session).',
      labelNames: ['key'],
      registers: [registry],
    }),
  };
}
