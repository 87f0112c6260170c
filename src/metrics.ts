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
  /** The service's own listeners (api, metrics): connections and requests refused or ended, by stage and reason (src/listener-guard.ts). */
  listenerRefused: Counter<'listener' | 'stage' | 'reason'>;
  /** The service's own listeners: connections open now. */
  listenerConnections: Gauge<'listener'>;
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
    listenerRefused: new Counter({
      name: 'tps_listener_refused_total',
      help: "Connections and requests the service's own listeners (listener=api, metrics) refused or ended, by stage (accept, head, body, idle) and reason: CONNECTIONS and SOURCE_CONNECTIONS (caps, at accept), HEADERS_TIMEOUT, REQUEST_TIMEOUT, IDLE_TIMEOUT, BODY_TOO_LARGE, RATE_LIMIT (before the body).",
      labelNames: ['listener', 'stage', 'reason'],
      registers: [registry],
    }),
    listenerConnections: new Gauge({
      name: 'tps_listener_connections',
      help: "Connections open now on the service's own listeners (listener=api, metrics).",
      labelNames: ['listener'],
      registers: [registry],
    }),
  };
}
