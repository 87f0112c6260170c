/**
 * `tps export`: the tenant's state in the format `tps apply -f` reads. Every entry carries its
 * `id`, so applying the export changes nothing, and edits to it (a port, a WAF setting) change
 * those resources in place. Proxies refer to certificates and CA certificates by the names given
 * here. Private keys are never in an export (the API never returns them): an uploaded certificate
 * is written as its fingerprint.
 */
import { Document, isMap } from 'yaml';
import { REFERENCE_FIELDS } from './plan.ts';
import type { CurrentCertificate, CurrentState } from './types.ts';

const READ_ONLY = ['status', 'statusDetail', 'createdAt', 'updatedAt'];

export interface ExportedState {
  caCertificates: Record<string, { id: string; certificates: { certificate: string; crlUrl?: string }[] }>;
  certificates: Record<string, { id: string; fingerprint?: string; domains?: string[] }>;
  trafficConfigs: { type: string; id: string; attributes: Record<string, unknown> }[];
}

export function exportState(current: CurrentState): ExportedState {
  const caNames = names(current.caCertificates, (ca) => ca.attributes.certificates[0]?.subject ?? '', 'ca');
  const certificateNames = names(current.certificates, certificateName, 'certificate');
  const exported: ExportedState = { caCertificates: {}, certificates: {}, trafficConfigs: [] };
  for (const ca of current.caCertificates) {
    exported.caCertificates[caNames.get(ca.id)!] = {
      id: ca.id,
      certificates: ca.attributes.certificates.map((entry) => ({
        certificate: entry.certificate,
        ...(entry.crlUrl !== undefined && { crlUrl: entry.crlUrl }),
      })),
    };
  }
  for (const certificate of current.certificates) {
    const { attributes } = certificate;
    exported.certificates[certificateNames.get(certificate.id)!] =
      attributes.source === 'ACME'
        ? { id: certificate.id, domains: attributes.domains }
        : { id: certificate.id, fingerprint: attributes.fingerprint ?? '' };
  }
  for (const config of current.trafficConfigs) {
    const attributes = structuredClone(config.attributes);
    for (const key of READ_ONLY) delete attributes[key];
    for (const field of REFERENCE_FIELDS) {
      const parent = field.path.slice(0, -1).reduce<unknown>((node, segment) => (isObject(node) ? node[segment] : undefined), attributes);
      const last = field.path.at(-1)!;
      if (!isObject(parent)) continue;
      const nameOf = (id: unknown) =>
        typeof id === 'string' ? ((field.kind === 'certificate' ? certificateNames : caNames).get(id) ?? id) : id;
      parent[last] = Array.isArray(parent[last]) ? (parent[last] as unknown[]).map(nameOf) : nameOf(parent[last]);
    }
    exported.trafficConfigs.push({ type: config.type, id: config.id, attributes });
  }
  return exported;
}

/** The export as YAML, with a comment on what each certificate is. */
export function exportYaml(current: CurrentState, exported: ExportedState, now = new Date()): string {
  const document = new Document(exported);
  document.commentBefore =
    ` tps export of tenant ${current.tenantId}, ${now.toISOString()}\n` +
    " Apply with: tps apply -f FILE (docs/operations.md). Each entry keeps its id; names are this file's own.";
  const byId = new Map(current.certificates.map((certificate) => [certificate.id, certificate]));
  for (const [name, entry] of Object.entries(exported.certificates)) {
    const node = document.getIn(['certificates', name]);
    const certificate = byId.get(entry.id);
    if (isMap(node) && certificate) node.commentBefore = ` ${describeCertificate(certificate)}`;
  }
  return document.toString({ lineWidth: 0, blockQuote: 'literal' });
}

function describeCertificate(certificate: CurrentCertificate): string {
  const { attributes } = certificate;
  const expiry = attributes.notAfter ? `, expires ${attributes.notAfter}` : '';
  if (attributes.source === 'ACME') return `service-issued, ${attributes.status}${expiry}`;
  return `uploaded: ${attributes.subject ?? attributes.domains.join(', ')}${expiry}`;
}

function certificateName(certificate: CurrentCertificate): string {
  const cn = /(?:^|,\s*)CN=([^,]+)/.exec(certificate.attributes.subject ?? '')?.[1];
  return certificate.attributes.domains[0] ?? cn ?? '';
}

/** A readable, unique name per resource: from its subject or first domain. */
function names<T extends { id: string }>(items: readonly T[], base: (item: T) => string, fallback: string): Map<string, string> {
  const result = new Map<string, string>();
  const taken = new Set<string>();
  for (const item of items) {
    let text = base(item);
    const cn = /(?:^|,\s*)CN=([^,]+)/.exec(text)?.[1];
    if (cn) text = cn;
    const slug =
      text
        .toLowerCase()
        .replace(/^\*\./, 'wildcard.')
        .replace(/[^a-z0-9._-]+/g, '-')
        .replace(/^[^a-z0-9]+|-+$/g, '')
        .slice(0, 90) || fallback;
    let name = slug;
    for (let n = 2; taken.has(name); n++) name = `${slug}-${n}`;
    taken.add(name);
    result.set(item.id, name);
  }
  return result;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
