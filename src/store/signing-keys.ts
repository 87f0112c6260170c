import type { Db } from './db.ts';

export interface SigningKeyRecord {
  kid: string;
  publicJwk: string;
  /** Sealed with the master key (SecretBox). */
  sealedPrivateKey: string;
  createdAt: string;
}

export class SigningKeyRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async list(): Promise<SigningKeyRecord[]> {
    const rows = await this.db.all<{ kid: string; public_jwk: string; private_key: string; created_at: string }>(
      'SELECT * FROM signing_keys ORDER BY created_at',
    );
    return rows.map((row) => ({ kid: row.kid, publicJwk: row.public_jwk, sealedPrivateKey: row.private_key, createdAt: row.created_at }));
  }

  /** Inserts the key unless one exists already (two nodes starting together keep the first). */
  async insertFirst(key: SigningKeyRecord): Promise<void> {
    await this.db.transaction(async (tx) => {
      const existing = await tx.one('SELECT kid FROM signing_keys LIMIT 1');
      if (existing) return;
      await tx.run('INSERT INTO signing_keys (kid, public_jwk, private_key, created_at) VALUES (?, ?, ?, ?)', [
        key.kid,
        key.publicJwk,
        key.sealedPrivateKey,
        key.createdAt,
      ]);
    });
  }
}
