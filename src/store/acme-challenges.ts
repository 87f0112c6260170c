/** Pending ACME challenges: what the edge answers while the CA validates a tenant's order. */
import type { Db } from './db.ts';

export type AcmeChallengeType = 'http-01' | 'tls-alpn-01';

export interface AcmeChallengeRecord {
  type: AcmeChallengeType;
  token: string;
  /** The tenant that ordered: only its proxies answer the challenge. */
  tenantId: string;
  /** The identifier being validated (lower case, no trailing dot). */
  domain: string;
  keyAuthorization: string;
  certificateId: string;
  expiresAt: string;
}

interface ChallengeRow {
  type: string;
  token: string;
  tenant_id: string;
  domain: string;
  key_authorization: string;
  certificate_id: string;
  expires_at: string;
}

const challengeFromRow = (row: ChallengeRow): AcmeChallengeRecord => ({
  type: row.type as AcmeChallengeType,
  token: row.token,
  tenantId: row.tenant_id,
  domain: row.domain,
  keyAuthorization: row.key_authorization,
  certificateId: row.certificate_id,
  expiresAt: row.expires_at,
});

/**
 * Challenges of running orders. Not part of the edge's snapshot (the revision does not move): the
 * edge asks for them when a CA's validation request arrives.
 */
export class AcmeChallengeRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async put(challenge: AcmeChallengeRecord): Promise<void> {
    await this.db.run(
      `INSERT INTO acme_challenges (type, token, tenant_id, domain, key_authorization, certificate_id, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (type, token) DO UPDATE SET tenant_id = excluded.tenant_id, domain = excluded.domain, key_authorization = excluded.key_authorization,
         certificate_id = excluded.certificate_id, expires_at = excluded.expires_at`,
      [
        challenge.type,
        challenge.token,
        challenge.tenantId,
        challenge.domain,
        challenge.keyAuthorization,
        challenge.certificateId,
        challenge.expiresAt,
        new Date().toISOString(),
      ],
    );
  }

  /** Every challenge not yet expired at `now` (a handful at any time). */
  async live(now: string, limit = 10_000): Promise<AcmeChallengeRecord[]> {
    const rows = await this.db.all<ChallengeRow>('SELECT * FROM acme_challenges WHERE expires_at > ? ORDER BY created_at DESC LIMIT ?', [
      now,
      limit,
    ]);
    return rows.map(challengeFromRow);
  }

  async deleteForCertificate(certificateId: string): Promise<void> {
    await this.db.run('DELETE FROM acme_challenges WHERE certificate_id = ?', [certificateId]);
  }

  async purgeExpired(now: string): Promise<void> {
    await this.db.run('DELETE FROM acme_challenges WHERE expires_at <= ?', [now]);
  }
}
