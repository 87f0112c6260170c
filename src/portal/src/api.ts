/**
 * The portal's only way to the service: the public API (JSON:API, authenticated by the session
 * cookie, with the session's CSRF token on writes) and the few /portal/api endpoints.
 */
import type { DistributedAttack, InsightEvent } from '@tps/model';

export const JSONAPI = 'application/vnd.api+json';

export interface ApiErrorObject {
  status: string;
  code: string;
  title: string;
  detail: string;
  source?: { pointer?: string; parameter?: string; header?: string };
}

/** A call the service refused: its JSON:API errors, as they came. */
export class ApiFailure extends Error {
  readonly status: number;
  readonly errors: ApiErrorObject[];
  constructor(status: number, errors: ApiErrorObject[]) {
    super(errors.map((error) => error.detail).join('; ') || `the service answered ${status}`);
    this.status = status;
    this.errors = errors;
  }
}

let csrfToken = '';
let onSignedOut: () => void = () => {};

export function setCsrfToken(token: string): void {
  csrfToken = token;
}
export function whenSignedOut(handler: () => void): void {
  onSignedOut = handler;
}

export async function call<T = unknown>(method: string, url: string, body?: unknown, contentType = JSONAPI): Promise<T> {
  const headers: Record<string, string> = { accept: `${JSONAPI}, application/json` };
  if (method !== 'GET' && method !== 'HEAD') headers['x-csrf-token'] = csrfToken;
  if (body !== undefined) headers['content-type'] = contentType;
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!response.ok) {
    const errors = (parsed as { errors?: ApiErrorObject[] } | undefined)?.errors ?? [
      { status: String(response.status), code: 'ERROR', title: response.statusText, detail: text.slice(0, 200) || response.statusText },
    ];
    if (response.status === 401 && !url.endsWith('/portal/api/login')) onSignedOut();
    throw new ApiFailure(response.status, errors);
  }
  return parsed as T;
}

// ---- portal endpoints ------------------------------------------------------------------------

export interface SessionInfo {
  user: { email: string; tenantId: string; tenantName: string };
  csrfToken: string;
  expiresAt: string;
}

export const portal = {
  login: (email: string, password: string) => call<SessionInfo>('POST', '/portal/api/login', { email, password }, 'application/json'),
  session: () => call<SessionInfo>('GET', '/portal/api/session'),
  logout: () => call('POST', '/portal/api/logout'),
  serviceAccounts: () => call<{ data: ServiceAccount[] }>('GET', '/portal/api/service-accounts'),
  createServiceAccount: (name: string, scopes: string[]) =>
    call<{ data: ServiceAccount & { clientSecret: string } }>('POST', '/portal/api/service-accounts', { name, scopes }, 'application/json'),
  revokeServiceAccount: (clientId: string) => call<{ data: ServiceAccount }>('DELETE', `/portal/api/service-accounts/${clientId}`),
  dashboard: (query: Record<string, string | undefined>) => call<Dashboard>('GET', `/portal/api/insight/dashboard?${params(query)}`),
  events: (query: Record<string, string | undefined>) =>
    call<{ data: EventResource[]; next: string | null }>('GET', `/portal/api/insight/events?${params(query)}`),
  event: (id: string) => call<{ data: EventResource }>('GET', `/portal/api/insight/events/${id}`),
};

export function params(query: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value !== undefined && value !== '') search.set(key, value);
  return search.toString();
}

export interface ServiceAccount {
  clientId: string;
  name: string;
  scopes: string[];
  createdAt: string;
  revokedAt: string | null;
}

export interface TopEntry {
  key: string;
  label: string | null;
  events: number;
  blocked: number;
  logged: number;
}

export interface Dashboard {
  range: { from: string; to: string; stepSeconds: number };
  totals: { events: number; blocked: number; logged: number; distinctSourceIps: number };
  series: { start: string; blocked: number; logged: number }[];
  top: { rule: TopEntry[]; ip: TopEntry[]; country: TopEntry[]; path: TopEntry[] };
}

/** An insight event as the export shows it. */
export interface EventResource {
  type: InsightEvent['type'];
  id: string;
  attributes: {
    timestamp: string;
    rules: (InsightEvent['rules'][number] & { matchedVariable?: string | null })[];
    supportId: string;
    action: 'BLOCKED' | 'LOGGED';
    tpc: string;
    destinationIp: string;
    source: { countryCode: string; ip: string; port: number };
    request: { method: string; path: string; headers: string[]; messageHeader: string; statusCode: number };
    /** WAF events: the requests this event stands for (more than 1: a sampled event under a flood). */
    requestCount?: number;
    rateLimit?: {
      threshold: { requests: number; periodSeconds: number };
      observedRequests: number;
      blockSeconds: number;
      firstBlockedAt: string;
      lastBlockedAt: string;
      blockedRequests: number;
      blockedUntil: string;
    };
  };
  relationships: { trafficConfig: { data: { id: string } } };
}

// ---- public API ------------------------------------------------------------------------------

export interface Resource<A = Record<string, unknown>> {
  type: string;
  id: string;
  attributes: A;
}

/** A distributed attack as GET /api/v2/insight/ddos-attacks lists it (the fields the portal shows). */
export type DdosAttackAttributes = DistributedAttack & { supportId: string };

export interface ProxyAttributes {
  frontend: { ipv4?: string; ipv6?: string; port: number; certificateId?: string | null; [key: string]: unknown };
  backend: { hosts: { address: string; port: number }[]; [key: string]: unknown };
  status?: 'PROVISIONING' | 'ACTIVE' | 'ERROR';
  statusDetail?: string | null;
  createdAt?: string;
  updatedAt?: string;
  [key: string]: unknown;
}

export interface IpAttributes {
  address: string;
  version: 4 | 6;
  assignedPorts: { port: number; protocol: 'TCP' | 'UDP' }[];
}

export interface CertificateAttributes {
  source: 'CUSTOMER' | 'ACME';
  status: 'PENDING' | 'ISSUED' | 'FAILED';
  statusDetail: string | null;
  domains: string[];
  subject?: string;
  subjectAltNames?: string[];
  issuer?: string;
  notBefore?: string;
  notAfter?: string;
  fingerprint?: string;
  createdAt?: string;
}

export interface CaCertificateAttributes {
  certificates: {
    subject: string;
    fingerprint: string;
    notAfter: string;
    crlUrl?: string;
    crl?: { fetchedAt: string | null; error: string | null; attemptedAt: string };
  }[];
  createdAt?: string;
}

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const CERTS = '/api/v2/traffic-mgmt/certificates';
const CAS = '/api/v2/traffic-mgmt/ca-certificates';

export const api = {
  proxies: () => call<{ data: Resource<ProxyAttributes>[] }>('GET', CONFIGS),
  proxy: (id: string) => call<{ data: Resource<ProxyAttributes> }>('GET', `${CONFIGS}/${id}`),
  createProxy: (type: string, attributes: unknown) =>
    call<{ data: Resource<ProxyAttributes> }>('POST', CONFIGS, { data: { type, attributes } }),
  replaceProxy: (id: string, type: string, attributes: unknown) =>
    call<{ data: Resource<ProxyAttributes> }>('PUT', `${CONFIGS}/${id}`, { data: { type, id, attributes } }),
  patchProxy: (id: string, type: string, attributes: unknown) =>
    call<{ data: Resource<ProxyAttributes> }>('PATCH', `${CONFIGS}/${id}`, { data: { type, id, attributes } }),
  deleteProxy: (id: string) => call('DELETE', `${CONFIGS}/${id}`),
  ips: (tenantId: string) => call<{ data: Resource<IpAttributes>[] }>('GET', `/api/v1/traffic-mgmt/accounts/${tenantId}/ips`),
  certificates: () => call<{ data: Resource<CertificateAttributes>[] }>('GET', CERTS),
  uploadCertificate: (attributes: { certificate: string; intermediateCertificates?: string; privateKey: string }) =>
    call<{ data: Resource<CertificateAttributes> }>('POST', `${CERTS}/pem`, { data: { type: 'certificate', attributes } }),
  requestCertificate: (domains: string[]) =>
    call<{ data: Resource<CertificateAttributes> }>('POST', `${CERTS}/lets-encrypt`, {
      data: { type: 'certificate', attributes: { domains } },
    }),
  deleteCertificate: (id: string) => call('DELETE', `${CERTS}/${id}`),
  caCertificates: () => call<{ data: Resource<CaCertificateAttributes>[] }>('GET', CAS),
  uploadCaCertificate: (certificates: { certificate: string; crlUrl?: string }[]) =>
    call<{ data: Resource<CaCertificateAttributes> }>('POST', CAS, { data: { type: 'caCertificate', attributes: { certificates } } }),
  deleteCaCertificate: (id: string) => call('DELETE', `${CAS}/${id}`),
  // Oldest first (cursor order), following `next` for at most 10 pages of 1,000.
  ddosAttacks: async () => {
    type Page = { data: (Resource<DdosAttackAttributes> & { relationships: unknown })[]; links: { next: string } };
    const data: Page['data'] = [];
    let url = '/api/v2/insight/ddos-attacks?page[size]=1000';
    for (let pages = 0; pages < 10; pages++) {
      const page = await call<Page>('GET', url);
      data.push(...page.data);
      if (page.data.length < 1000) break;
      url = page.links.next;
    }
    return { data };
  },
};
