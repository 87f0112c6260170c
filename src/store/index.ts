/** The store: one database (SQLite or PostgreSQL) behind one repository per resource. */
import { openDb, type Db } from './db.ts';
import { migrate } from './migrations.ts';
import { TenantRepository } from './tenants.ts';
import { ServiceAccountRepository } from './service-accounts.ts';
import { SigningKeyRepository } from './signing-keys.ts';
import { TrafficConfigRepository } from './traffic-configs.ts';
import { CertificateRepository } from './certificates.ts';
import { CaCertificateRepository } from './ca-certificates.ts';
import { AcmeAccountRepository } from './acme-accounts.ts';
import { AcmeChallengeRepository } from './acme-challenges.ts';
import { CrlCacheRepository } from './crl-cache.ts';
import { InsightEventRepository } from './insight-events.ts';
import { InsightAggregates } from './insight-aggregates.ts';
import { PortalUserRepository } from './portal-users.ts';
import { EdgeStatusRepository } from './edge-status.ts';
import { currentRevision } from './revision.ts';
import { SealedSecretRepository } from './sealed-secrets.ts';
import { DEFAULT_QUOTAS } from './quotas.ts';

export interface Store {
  db: Db;
  tenants: TenantRepository;
  serviceAccounts: ServiceAccountRepository;
  signingKeys: SigningKeyRepository;
  trafficConfigs: TrafficConfigRepository;
  certificates: CertificateRepository;
  caCertificates: CaCertificateRepository;
  acmeAccounts: AcmeAccountRepository;
  acmeChallenges: AcmeChallengeRepository;
  crlCache: CrlCacheRepository;
  insightEvents: InsightEventRepository;
  insightAggregates: InsightAggregates;
  portalUsers: PortalUserRepository;
  edgeStatus: EdgeStatusRepository;
  sealedSecrets: SealedSecretRepository;
  revision(): Promise<number>;
  close(): Promise<void>;
}

export interface StoreOptions {
  databaseUrl?: string | undefined;
  dataDir: string;
  /** Per-tenant quotas (operator settings TPS_QUOTA_*); absent: DEFAULT_QUOTAS. */
  quotaProxies?: number | undefined;
  quotaCertificates?: number | undefined;
  quotaCaCertificates?: number | undefined;
}

/** Opens the store and brings its schema up to date. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const db = await openDb(options);
  await migrate(db);
  const quotas = {
    proxies: options.quotaProxies ?? DEFAULT_QUOTAS.proxies,
    certificates: options.quotaCertificates ?? DEFAULT_QUOTAS.certificates,
    caCertificates: options.quotaCaCertificates ?? DEFAULT_QUOTAS.caCertificates,
  };
  return {
    db,
    tenants: new TenantRepository(db),
    serviceAccounts: new ServiceAccountRepository(db),
    signingKeys: new SigningKeyRepository(db),
    trafficConfigs: new TrafficConfigRepository(db, quotas),
    certificates: new CertificateRepository(db, quotas),
    caCertificates: new CaCertificateRepository(db, quotas),
    acmeAccounts: new AcmeAccountRepository(db),
    acmeChallenges: new AcmeChallengeRepository(db),
    crlCache: new CrlCacheRepository(db),
    insightEvents: new InsightEventRepository(db),
    insightAggregates: new InsightAggregates(db),
    portalUsers: new PortalUserRepository(db),
    edgeStatus: new EdgeStatusRepository(db),
    sealedSecrets: new SealedSecretRepository(db),
    revision: () => currentRevision(db),
    close: () => db.close(),
  };
}
