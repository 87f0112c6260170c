/**
 * Configuration as code: the state a file asks for (`tps apply -f`), the state the API reports,
 * and the changes between them. Shared by the file reader, the planner, the applier and export.
 */
import type { ProxyType } from '@tps/model';

/** A place in the file, as keys and indexes from its root. */
export type FilePath = (string | number)[];

/** Something wrong with the file, found before any change is made. */
export interface FileProblem {
  code: string;
  detail: string;
  path: FilePath;
  /** The API's JSON:API pointer, when the API's own schema or the API found the problem. */
  pointer?: string;
  status?: string;
  /** Where the YAML parser stopped, for syntax errors (1-based). */
  position?: { line: number; column: number };
}

export interface CaCertificateEntry {
  certificate: string;
  crlUrl?: string;
}

/** A CA certificate the file asks for, under the file's name for it (`key`). */
export interface DesiredCaCertificate {
  key: string;
  id?: string;
  /** Absent: the entry only names an existing CA certificate by `id`. */
  certificates?: CaCertificateEntry[];
  /** SHA-256 fingerprints of `certificates`, in order (the matching key). */
  fingerprints?: string[];
}

/** The PEM attributes of an upload, and the file attribute each came from (`privateKey` or `privateKeyFile`). */
export interface CertificateUpload {
  certificate: string;
  intermediateCertificates?: string;
  privateKey?: string;
  sourceAttribute: Record<'certificate' | 'intermediateCertificates' | 'privateKey', string>;
}

/**
 * A certificate the file asks for. Forms: `id` alone (an existing certificate, whatever it is);
 * `fingerprint` (an uploaded certificate); `certificate` + `privateKey` (uploaded unless a certificate
 * with the same leaf exists); `domains` (service-issued, requested unless one for the same names exists).
 */
export interface DesiredCertificate {
  key: string;
  id?: string;
  fingerprint?: string;
  upload?: CertificateUpload;
  domains?: string[];
}

export interface DesiredTrafficConfig {
  /** Position in the file's `trafficConfigs` list. */
  index: number;
  type: ProxyType;
  id?: string;
  attributes: Record<string, unknown>;
}

/** The file, read and checked. A section that is absent is not managed: apply leaves that kind alone. */
export interface DesiredState {
  caCertificates?: DesiredCaCertificate[];
  certificates?: DesiredCertificate[];
  trafficConfigs?: DesiredTrafficConfig[];
}

// ---------------------------------------------------------------------------------------------
// The state the API reports (the fields apply reads).

export interface CurrentCaCertificate {
  id: string;
  attributes: { certificates: { certificate: string; crlUrl?: string; subject: string; fingerprint: string; notAfter: string }[] };
}

export interface CurrentCertificate {
  id: string;
  attributes: {
    source: 'CUSTOMER' | 'ACME';
    status: 'PENDING' | 'ISSUED' | 'FAILED';
    domains: string[];
    subject?: string;
    notAfter?: string;
    fingerprint?: string;
  };
}

export interface CurrentTrafficConfig {
  id: string;
  type: ProxyType;
  attributes: Record<string, unknown>;
}

export interface CurrentState {
  tenantId: string;
  caCertificates: CurrentCaCertificate[];
  certificates: CurrentCertificate[];
  trafficConfigs: CurrentTrafficConfig[];
  /** The tenant's front-end IP pool. */
  frontendIps: string[];
  /** Front-end bindings taken by any proxy, this tenant's or another's (`ip:port/PROTOCOL`, as bindingLabel writes them). */
  assignedBindings: string[];
}

// ---------------------------------------------------------------------------------------------
// The plan.

/** A reference from a proxy to a certificate or CA certificate the plan creates first. */
export interface PendingReference {
  pending: 'certificate' | 'caCertificate';
  key: string;
}

export interface AttributeChange {
  /** Dotted path inside `attributes`. */
  path: string;
  from: unknown;
  to: unknown;
}

export type Change =
  | { kind: 'caCertificate'; action: 'create'; key: string; entry: DesiredCaCertificate; label: string }
  | { kind: 'caCertificate'; action: 'delete'; id: string; label: string }
  | { kind: 'certificate'; action: 'create'; key: string; entry: DesiredCertificate; label: string }
  | { kind: 'certificate'; action: 'delete'; id: string; label: string }
  | {
      kind: 'trafficConfig';
      action: 'create';
      index: number;
      type: ProxyType;
      /** References to resources created by this plan are PendingReference objects until they exist. */
      attributes: Record<string, unknown>;
      label: string;
    }
  | {
      kind: 'trafficConfig';
      action: 'update';
      index: number;
      id: string;
      type: ProxyType;
      attributes: Record<string, unknown>;
      label: string;
      changes: AttributeChange[];
    }
  | { kind: 'trafficConfig'; action: 'delete'; id: string; label: string };

export interface Plan {
  /** In the order they are made: see `orderOfChanges` in plan.ts. */
  changes: Change[];
  unchanged: number;
  problems: FileProblem[];
}
