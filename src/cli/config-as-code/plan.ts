/**
 * The changes that make a tenant's state equal to a file's (`tps apply`): a pure function of the
 * two, so a dry run prints exactly what a run would do.
 *
 * Matching (the API has no name attribute, so the file's names live in the file only):
 * 1. An entry with an `id` (export writes them) is the resource with that id, when the tenant has
 *    it and, for certificates and CA certificates (which cannot change in place), when its content
 *    is the entry's.
 * 2. Else by content: a proxy by its front-end bindings (ip, port, protocol; the store allows one
 *    proxy per binding), an uploaded certificate by its leaf's SHA-256 fingerprint, a service-issued
 *    one by its set of domains, a CA certificate by its certificates' fingerprints and CRL URLs.
 * Each existing resource stands for at most one entry; entries claim in file order. A matched proxy
 * whose attributes differ is replaced (PUT), one whose type differs is deleted and created again;
 * a certificate or CA certificate whose content changed is created anew and the old one deleted
 * once no proxy refers to it. Resources of a managed kind that no entry claims are deleted.
 */
import { validateBody } from '../../api/schemas/validator.ts';
import { ApiError } from '../../api/jsonapi.ts';
import { TrafficConfigDocument, HTTP_PROXY, type ProxyType } from '@tps/model';
import net from 'node:net';
import { canonicalIp } from '../../net/ip.ts';
import { pointerSegments, detailWithoutPointer } from './file.ts';
import type {
  AttributeChange,
  Change,
  CurrentCaCertificate,
  CurrentCertificate,
  CurrentState,
  CurrentTrafficConfig,
  DesiredCaCertificate,
  DesiredCertificate,
  DesiredState,
  DesiredTrafficConfig,
  FilePath,
  FileProblem,
  PendingReference,
  Plan,
} from './types.ts';

const READ_ONLY = ['status', 'statusDetail', 'createdAt', 'updatedAt'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Where a proxy refers to certificates and CA certificates (HTTP proxies only). */
export const REFERENCE_FIELDS: readonly { path: readonly string[]; kind: 'certificate' | 'caCertificate'; list: boolean }[] = [
  { path: ['frontend', 'certificateId'], kind: 'certificate', list: false },
  { path: ['frontend', 'clientCertificateVerification', 'caCertificateIds'], kind: 'caCertificate', list: true },
  { path: ['backend', 'tlsSettings', 'clientCertificateId'], kind: 'certificate', list: false },
  { path: ['backend', 'tlsSettings', 'verifyCertificate', 'caCertificateIds'], kind: 'caCertificate', list: true },
];

export function planChanges(desired: DesiredState, current: CurrentState): Plan {
  const problems: FileProblem[] = [];
  const changes: Change[] = [];
  let unchanged = 0;

  // ---- CA certificates
  const caIds = new Map<string, string | PendingReference>();
  if (desired.caCertificates) {
    const claimed = new Set<string>();
    const byId = new Map(current.caCertificates.map((ca) => [ca.id, ca]));
    const matches = new Map<string, CurrentCaCertificate>();
    for (const entry of desired.caCertificates) {
      const existing = entry.id !== undefined ? byId.get(entry.id) : undefined;
      if (existing && (entry.certificates === undefined || caSignature(entry) === currentCaSignature(existing))) {
        matches.set(entry.key, existing);
        claimed.add(existing.id);
      } else if (entry.certificates === undefined) {
        problems.push({
          code: 'NOT_FOUND',
          detail: `the tenant has no CA certificate ${entry.id}`,
          path: ['caCertificates', entry.key, 'id'],
        });
      }
    }
    for (const entry of desired.caCertificates) {
      if (matches.has(entry.key) || entry.certificates === undefined) continue;
      const existing = current.caCertificates.find((ca) => !claimed.has(ca.id) && currentCaSignature(ca) === caSignature(entry));
      if (existing) {
        matches.set(entry.key, existing);
        claimed.add(existing.id);
      }
    }
    for (const entry of desired.caCertificates) {
      const match = matches.get(entry.key);
      if (match) {
        caIds.set(entry.key, match.id);
        unchanged++;
      } else if (entry.certificates !== undefined) {
        caIds.set(entry.key, { pending: 'caCertificate', key: entry.key });
        changes.push({ kind: 'caCertificate', action: 'create', key: entry.key, entry, label: `caCertificate ${entry.key}` });
      }
    }
    for (const ca of current.caCertificates) {
      if (!claimed.has(ca.id))
        changes.push({ kind: 'caCertificate', action: 'delete', id: ca.id, label: `caCertificate ${ca.id} (${caSubject(ca)})` });
    }
  }

  // ---- Certificates
  const certificateIds = new Map<string, string | PendingReference>();
  if (desired.certificates) {
    const claimed = new Set<string>();
    const byId = new Map(current.certificates.map((certificate) => [certificate.id, certificate]));
    const matches = new Map<string, CurrentCertificate>();
    for (const entry of desired.certificates) {
      const existing = entry.id !== undefined ? byId.get(entry.id) : undefined;
      if (existing && certificateMatches(entry, existing)) {
        matches.set(entry.key, existing);
        claimed.add(existing.id);
      } else if (entry.fingerprint === undefined && entry.domains === undefined) {
        problems.push({ code: 'NOT_FOUND', detail: `the tenant has no certificate ${entry.id}`, path: ['certificates', entry.key, 'id'] });
      }
    }
    for (const entry of desired.certificates) {
      if (matches.has(entry.key) || (entry.fingerprint === undefined && entry.domains === undefined)) continue;
      const candidates = current.certificates.filter(
        (certificate) => !claimed.has(certificate.id) && certificateMatches(entry, certificate),
      );
      // Of several service-issued certificates for the same names, the one that works.
      const existing = [...candidates].sort((a, b) => statusRank(a) - statusRank(b))[0];
      if (existing) {
        matches.set(entry.key, existing);
        claimed.add(existing.id);
      }
    }
    for (const entry of desired.certificates) {
      const match = matches.get(entry.key);
      if (match) {
        certificateIds.set(entry.key, match.id);
        unchanged++;
      } else if (entry.domains !== undefined || entry.upload?.privateKey !== undefined) {
        certificateIds.set(entry.key, { pending: 'certificate', key: entry.key });
        const how =
          entry.domains !== undefined ? `request for ${entry.domains.join(', ')}` : `upload ${entry.fingerprint?.slice(0, 23)}...`;
        changes.push({ kind: 'certificate', action: 'create', key: entry.key, entry, label: `certificate ${entry.key} (${how})` });
      } else if (entry.fingerprint !== undefined) {
        problems.push({
          code: 'CERTIFICATE_NOT_FOUND',
          detail: `the tenant has no uploaded certificate with fingerprint ${entry.fingerprint}: give certificate and privateKey (or privateKeyFile) to upload it`,
          path: ['certificates', entry.key, entry.upload ? entry.upload.sourceAttribute.certificate : 'fingerprint'],
        });
      }
    }
    for (const certificate of current.certificates) {
      if (!claimed.has(certificate.id)) {
        changes.push({
          kind: 'certificate',
          action: 'delete',
          id: certificate.id,
          label: `certificate ${certificate.id} (${certificateLabel(certificate)})`,
        });
      }
    }
  }

  // ---- Traffic configurations
  if (desired.trafficConfigs) {
    const deletes: Change[] = [];
    const updates: Change[] = [];
    const creates: Change[] = [];
    const claimed = new Set<string>();
    const byId = new Map(current.trafficConfigs.map((config) => [config.id, config]));
    const matches = new Map<number, CurrentTrafficConfig>();
    const pool = new Set(current.frontendIps.map(canonicalIp));
    const bindingOwner = new Map<string, number>();

    // Bindings held by proxies of other tenants: a clash found now is one found before any change.
    const own = new Set(current.trafficConfigs.flatMap((config) => bindingsOf(config.type, config.attributes)));
    const takenElsewhere = new Set(current.assignedBindings.filter((binding) => !own.has(binding)));

    const resolved = new Map<number, Record<string, unknown>>();
    for (const entry of desired.trafficConfigs) {
      const frontend = isObject(entry.attributes.frontend) ? entry.attributes.frontend : {};
      for (const family of ['ipv4', 'ipv6'] as const) {
        const ip = frontend[family];
        if (typeof ip === 'string' && isIp(ip) && !pool.has(canonicalIp(ip))) {
          problems.push({
            code: 'UNKNOWN_FRONTEND_IP',
            detail: `${ip} is not one of the account's available front-end IPs (${current.frontendIps.join(', ')})`,
            path: ['trafficConfigs', entry.index, 'attributes', 'frontend', family],
          });
        }
      }
      const attributes = resolveReferences(entry, { desired, certificateIds, caIds, current }, problems);
      const checked = checkAttributes(entry, attributes, problems);
      if (!checked) continue;
      resolved.set(entry.index, attributes);
      for (const binding of bindingsOf(entry.type, checked)) {
        const other = bindingOwner.get(binding);
        const at: FilePath = ['trafficConfigs', entry.index, 'attributes', 'frontend', 'port'];
        if (other !== undefined) {
          problems.push({ code: 'PORT_IN_USE', detail: `${binding} is also the front-end of trafficConfigs[${other}]`, path: at });
        } else if (takenElsewhere.has(binding)) {
          problems.push({
            code: 'PORT_IN_USE',
            detail: `${binding} is assigned to a proxy of another account: choose another port`,
            path: at,
          });
        } else {
          bindingOwner.set(binding, entry.index);
        }
      }
    }

    for (const entry of desired.trafficConfigs) {
      const existing = entry.id !== undefined ? byId.get(entry.id) : undefined;
      if (existing) {
        matches.set(entry.index, existing);
        claimed.add(existing.id);
      }
    }
    for (const entry of desired.trafficConfigs) {
      const attributes = resolved.get(entry.index);
      if (matches.has(entry.index) || !attributes) continue;
      const bindings = new Set(bindingsOf(entry.type, attributes));
      const sharing = current.trafficConfigs.filter(
        (config) => !claimed.has(config.id) && bindingsOf(config.type, config.attributes).some((binding) => bindings.has(binding)),
      );
      const existing = sharing.find((config) => config.type === entry.type) ?? sharing[0];
      if (existing) {
        matches.set(entry.index, existing);
        claimed.add(existing.id);
      }
    }

    for (const entry of desired.trafficConfigs) {
      const attributes = resolved.get(entry.index);
      if (!attributes) continue;
      const existing = matches.get(entry.index);
      const label = `${entry.type} ${frontendLabel(entry.type, attributes)}`;
      if (!existing) {
        creates.push({ kind: 'trafficConfig', action: 'create', index: entry.index, type: entry.type, attributes, label });
      } else if (existing.type !== entry.type) {
        deletes.push({
          kind: 'trafficConfig',
          action: 'delete',
          id: existing.id,
          label: `${existing.type} ${frontendLabel(existing.type, existing.attributes)} (${existing.id}, replaced by trafficConfigs[${entry.index}])`,
        });
        creates.push({ kind: 'trafficConfig', action: 'create', index: entry.index, type: entry.type, attributes, label });
      } else {
        const differences = attributeChanges(
          normalized(existing.type, existing.attributes) ?? existing.attributes,
          normalized(entry.type, attributes) ?? attributes,
        );
        if (differences.length === 0) {
          unchanged++;
        } else {
          updates.push({
            kind: 'trafficConfig',
            action: 'update',
            index: entry.index,
            id: existing.id,
            type: entry.type,
            attributes,
            label: `${label} (${existing.id})`,
            changes: differences,
          });
        }
      }
    }
    for (const config of current.trafficConfigs) {
      if (!claimed.has(config.id)) {
        deletes.push({
          kind: 'trafficConfig',
          action: 'delete',
          id: config.id,
          label: `${config.type} ${frontendLabel(config.type, config.attributes)} (${config.id})`,
        });
      }
    }
    changes.push(...deletes, ...updates, ...creates);
  }

  return { changes: orderOfChanges(changes), unchanged, problems };
}

/**
 * The order changes are made in, so that each step finds what it needs: new CA certificates and
 * certificates first (proxies refer to them), then proxies deleted (their ports become free),
 * changed, created, and last the certificates and CA certificates no proxy refers to any more.
 */
export function orderOfChanges(changes: readonly Change[]): Change[] {
  const rank = (change: Change): number => {
    if (change.action === 'create' && change.kind === 'caCertificate') return 0;
    if (change.action === 'create' && change.kind === 'certificate') return 1;
    if (change.kind === 'trafficConfig') return change.action === 'delete' ? 2 : change.action === 'update' ? 3 : 4;
    return change.kind === 'certificate' ? 5 : 6;
  };
  return changes
    .map((change, position) => ({ change, position }))
    .sort((a, b) => rank(a.change) - rank(b.change) || a.position - b.position)
    .map(({ change }) => change);
}

/** Replaces names of the file's certificates and CA certificates by ids (or pending references). */
function resolveReferences(
  entry: DesiredTrafficConfig,
  context: {
    desired: DesiredState;
    certificateIds: Map<string, string | PendingReference>;
    caIds: Map<string, string | PendingReference>;
    current: CurrentState;
  },
  problems: FileProblem[],
): Record<string, unknown> {
  const attributes = structuredClone(entry.attributes);
  if (entry.type !== HTTP_PROXY) return attributes;
  const resolve = (kind: 'certificate' | 'caCertificate', value: unknown, at: FilePath): unknown => {
    if (typeof value !== 'string') return value;
    const section = kind === 'certificate' ? context.desired.certificates : context.desired.caCertificates;
    const names = kind === 'certificate' ? context.certificateIds : context.caIds;
    const sectionName = kind === 'certificate' ? 'certificates' : 'caCertificates';
    // An entry with a problem of its own has no id: a pending reference keeps this one quiet.
    if (section?.some((item) => item.key === value)) return names.get(value) ?? { pending: kind, key: value };
    if (!UUID.test(value)) {
      // Reported once, here; the placeholder keeps the schema's uuid check from saying it again.
      const known = section?.map((item) => item.key) ?? [];
      problems.push({
        code: 'UNKNOWN_REFERENCE',
        detail: `"${value}" names no entry of ${sectionName}${known.length ? ` (${known.join(', ')})` : ''} and is not an id`,
        path: at,
      });
      return { pending: kind, key: value };
    }
    if (section && ![...names.values()].includes(value)) {
      problems.push({
        code: 'REFERENCE_NOT_IN_FILE',
        detail: `${kind} ${value} is not one of this file's ${sectionName}, which apply makes the whole list: name it there`,
        path: at,
      });
    }
    return value;
  };
  for (const field of REFERENCE_FIELDS) {
    const parent = field.path.slice(0, -1).reduce<unknown>((node, segment) => (isObject(node) ? node[segment] : undefined), attributes);
    const last = field.path.at(-1)!;
    if (!isObject(parent) || parent[last] === undefined || parent[last] === null) continue;
    const at: FilePath = ['trafficConfigs', entry.index, 'attributes', ...field.path];
    parent[last] =
      field.list && Array.isArray(parent[last])
        ? (parent[last] as unknown[]).map((value, index) => resolve(field.kind, value, [...at, index]))
        : resolve(field.kind, parent[last], at);
  }
  return attributes;
}

/**
 * The attributes as the API would store them (defaults applied, read-only attributes dropped),
 * checked with the API's own schema; problems point into the file.
 */
function checkAttributes(
  entry: DesiredTrafficConfig,
  attributes: Record<string, unknown>,
  problems: FileProblem[],
): Record<string, unknown> | undefined {
  try {
    return validateAttributes(entry.type, withPlaceholders(attributes));
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    for (const problem of error.errors) {
      const pointer = problem.source?.pointer ?? '/data';
      const inData = pointerSegments(pointer).slice(1);
      problems.push({
        code: problem.code,
        detail: detailWithoutPointer(problem.detail, pointer),
        path: ['trafficConfigs', entry.index, ...inData],
        pointer,
        status: problem.status,
      });
    }
    return undefined;
  }
}

function validateAttributes(type: ProxyType, attributes: Record<string, unknown>): Record<string, unknown> {
  const document = validateBody(TrafficConfigDocument, { data: { type, attributes: structuredClone(attributes) } });
  return document.data.attributes as Record<string, unknown>;
}

/** Stands for ids that do not exist yet, so that the schema's uuid format accepts them. */
const PLACEHOLDER_ID = '00000000-0000-4000-8000-000000000000';

function withPlaceholders(value: unknown): Record<string, unknown> {
  return JSON.parse(JSON.stringify(value, (_key, item: unknown) => (isPending(item) ? PLACEHOLDER_ID : item))) as Record<string, unknown>;
}

/**
 * The comparable form of a proxy's attributes: defaults applied, read-only attributes and nulls
 * (which mean "absent" in this API) dropped, front-end IPs canonical. Pending references stay.
 */
function normalized(type: ProxyType, attributes: Record<string, unknown>): Record<string, unknown> | undefined {
  let checked: Record<string, unknown>;
  try {
    checked = validateAttributes(type, withPlaceholders(attributes));
  } catch {
    return undefined;
  }
  const restored = restorePending(checked, attributes);
  for (const key of READ_ONLY) delete restored[key];
  const clean = withoutNulls(restored) as Record<string, unknown>;
  const frontend = clean.frontend;
  if (isObject(frontend)) {
    for (const family of ['ipv4', 'ipv6'])
      if (typeof frontend[family] === 'string') frontend[family] = canonicalIp(frontend[family] as string);
  }
  return clean;
}

/** Puts the pending references of `original` back where the placeholders went. */
function restorePending(checked: Record<string, unknown>, original: Record<string, unknown>): Record<string, unknown> {
  for (const field of REFERENCE_FIELDS) {
    const from = field.path.reduce<unknown>((node, segment) => (isObject(node) ? node[segment] : undefined), original);
    if (from === undefined) continue;
    const parent = field.path.slice(0, -1).reduce<unknown>((node, segment) => (isObject(node) ? node[segment] : undefined), checked);
    if (isObject(parent)) parent[field.path.at(-1)!] = structuredClone(from);
  }
  return checked;
}

function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (!isObject(value) || isPending(value)) return value;
  const result: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) if (item !== null && item !== undefined) result[key] = withoutNulls(item);
  return result;
}

/** The leaves that differ between two comparable attribute objects. */
export function attributeChanges(from: unknown, to: unknown, at = ''): AttributeChange[] {
  if (isObject(from) && isObject(to) && !isPending(from) && !isPending(to)) {
    const keys = [...new Set([...Object.keys(from), ...Object.keys(to)])].sort();
    return keys.flatMap((key) => attributeChanges(from[key], to[key], at ? `${at}.${key}` : key));
  }
  return stableJson(from) === stableJson(to) ? [] : [{ path: at, from, to }];
}

/** JSON with object keys sorted: equal values, equal text. */
export function stableJson(value: unknown): string {
  return (
    JSON.stringify(value, (_key, item: unknown) =>
      isObject(item) && !Array.isArray(item)
        ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
        : item,
    ) ?? 'undefined'
  );
}

/** `ip:port/protocol` of each front-end binding, as the store counts them. */
function bindingsOf(type: ProxyType, attributes: Record<string, unknown>): string[] {
  const frontend = isObject(attributes.frontend) ? attributes.frontend : {};
  const protocols = type === HTTP_PROXY ? ['TCP'] : Array.isArray(attributes.protocols) ? (attributes.protocols as string[]) : ['TCP'];
  const ips = [frontend.ipv4, frontend.ipv6].filter((ip): ip is string => typeof ip === 'string' && isIp(ip));
  return ips.flatMap((ip) => protocols.map((protocol) => bindingLabel(ip, frontend.port, protocol)));
}

/** `ip:port/PROTOCOL` (`[v6]:port/PROTOCOL`), the IP canonical: one text per front-end binding. */
export function bindingLabel(ip: string, port: unknown, protocol: string): string {
  const canonical = canonicalIp(ip);
  return `${canonical.includes(':') ? `[${canonical}]` : canonical}:${String(port)}/${protocol}`;
}

function frontendLabel(type: ProxyType, attributes: Record<string, unknown>): string {
  const bindings = bindingsOf(type, attributes);
  return bindings.length > 0 ? bindings.join(' ') : '(no front-end)';
}

function caSignature(entry: DesiredCaCertificate): string {
  return JSON.stringify((entry.certificates ?? []).map((item, index) => [entry.fingerprints?.[index] ?? '', item.crlUrl ?? null]));
}

function currentCaSignature(ca: CurrentCaCertificate): string {
  return JSON.stringify(ca.attributes.certificates.map((item) => [item.fingerprint, item.crlUrl ?? null]));
}

function caSubject(ca: CurrentCaCertificate): string {
  return ca.attributes.certificates.map((item) => item.subject).join('; ');
}

function certificateMatches(entry: DesiredCertificate, certificate: CurrentCertificate): boolean {
  if (entry.domains !== undefined) {
    return certificate.attributes.source === 'ACME' && sameSet(entry.domains, certificate.attributes.domains);
  }
  if (entry.fingerprint !== undefined) {
    return certificate.attributes.source === 'CUSTOMER' && certificate.attributes.fingerprint === entry.fingerprint;
  }
  return true;
}

function statusRank(certificate: CurrentCertificate): number {
  return { ISSUED: 0, PENDING: 1, FAILED: 2 }[certificate.attributes.status] ?? 3;
}

export function certificateLabel(certificate: CurrentCertificate): string {
  const { attributes } = certificate;
  if (attributes.source === 'ACME') return `service-issued for ${attributes.domains.join(', ')}, ${attributes.status}`;
  return `${attributes.subject ?? attributes.domains.join(', ')}, ${attributes.fingerprint ?? ''}`;
}

const sameSet = (a: readonly string[], b: readonly string[]) => {
  const left = new Set(a.map((item) => item.toLowerCase()));
  const right = new Set(b.map((item) => item.toLowerCase()));
  return left.size === right.size && [...left].every((item) => right.has(item));
};

const isIp = (value: string) => net.isIP(value) !== 0;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function isPending(value: unknown): value is PendingReference {
  return isObject(value) && typeof value.pending === 'string' && typeof value.key === 'string' && Object.keys(value).length === 2;
}
