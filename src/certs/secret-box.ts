/**
 * Encryption at rest for private keys (TLS keys, ACME account keys, the token signing key):
 * AES-256-GCM under the operator's master key. The master key comes from TPS_MASTER_KEY or, on a
 * single node, is generated once into the data folder (mode 0600). Losing it makes the stored keys
 * unreadable, so the demo prints where it is.
 *
 * Every sealed value is bound to the row that holds it: the row's table, id and tenant are the
 * cipher's associated data, so a sealed key copied into another row (another tenant's certificate,
 * say) does not open there. The tag is always the full 16 bytes; a shorter one is refused.
 *
 * Formats: `v2:iv:tag:body` is bound to its row; `v1:iv:tag:body` is unbound (stores written
 * before binding). A v1 value is opened only by `upgrade`, which re-seals it as v2 for the row
 * that holds it (for the whole store at every start, src/certs/upgrade-sealed-secrets.ts), never
 * by `open`: a v1 value planted in a row would otherwise open wherever it is put.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const LEGACY_VERSION = 'v1';
const VERSION = 'v2';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** The row a sealed value belongs to. */
export interface SealBinding {
  /** The table (or kind of record) that holds the value. */
  table: 'certificates' | 'signing_keys' | 'acme_accounts';
  /** The row's id (certificate id, key id, ACME directory URL with the tenant). */
  id: string;
  /** The tenant owning the row; absent for the service's own keys. */
  tenantId?: string | undefined;
}

export const certificateKeyBinding = (record: { id: string; tenantId: string }): SealBinding => ({
  table: 'certificates',
  id: record.id,
  tenantId: record.tenantId,
});
export const signingKeyBinding = (kid: string): SealBinding => ({ table: 'signing_keys', id: kid });
export const acmeAccountKeyBinding = (directoryUrl: string, tenantId: string): SealBinding => ({
  table: 'acme_accounts',
  id: directoryUrl,
  tenantId,
});

/** A sealed value that does not open: wrong key, wrong row, altered, or not a sealed value at all. */
export class SealedSecretError extends Error {}

/** Associated data naming the row; NUL-separated, and no part may hold a NUL, so parts cannot shift. */
function associatedData(binding: SealBinding): Buffer {
  const parts = [`tps-secret-box/${VERSION}`, binding.table, binding.tenantId ?? '', binding.id];
  if (parts.some((part) => part.includes('\0'))) throw new SealedSecretError('a sealed value binding cannot contain NUL');
  return Buffer.from(parts.join('\0'), 'utf8');
}

function parse(sealed: string): { version: string; iv: Buffer; tag: Buffer; body: Buffer } {
  const parts = sealed.split(':');
  const [version, iv, tag, body] = parts;
  if (parts.length !== 4 || version === undefined || iv === undefined || tag === undefined || body === undefined) {
    throw new SealedSecretError('not a sealed secret');
  }
  const decoded = { version, iv: Buffer.from(iv, 'base64'), tag: Buffer.from(tag, 'base64'), body: Buffer.from(body, 'base64') };
  if (decoded.iv.length !== IV_BYTES || decoded.tag.length !== TAG_BYTES) throw new SealedSecretError('not a sealed secret');
  return decoded;
}

export class SecretBox {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error('master key must be 32 bytes');
    this.#key = key;
  }

  /** The master key from settings, or the one in dataDir/master.key (created on first start). */
  static fromSettings(settings: { masterKey: string | undefined; dataDir: string }): SecretBox {
    if (settings.masterKey) return new SecretBox(Buffer.from(settings.masterKey, 'base64'));
    const file = path.join(settings.dataDir, 'master.key');
    fs.mkdirSync(settings.dataDir, { recursive: true });
    try {
      // 'wx' fails if the file exists, so two processes starting together cannot both create one.
      fs.writeFileSync(file, `${crypto.randomBytes(32).toString('base64')}\n`, { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    return new SecretBox(Buffer.from(fs.readFileSync(file, 'utf8').trim(), 'base64'));
  }

  /**
   * A key for another purpose, derived from the master key (HKDF-SHA256): every node with the same
   * master key derives the same, and it reveals nothing of the master key.
   */
  derive(purpose: string, bytes = 32): Buffer {
    return Buffer.from(crypto.hkdfSync('sha256', this.#key, Buffer.alloc(0), `tps ${purpose}`, bytes));
  }

  seal(plaintext: string, binding: SealBinding): string {
    const iv = crypto.randomBytes(IV_BYTES);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(associatedData(binding));
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return [VERSION, iv.toString('base64'), cipher.getAuthTag().toString('base64'), body.toString('base64')].join(':');
  }

  /** Opens a value sealed for this row; throws SealedSecretError for anything else. */
  open(sealed: string, binding: SealBinding): string {
    const { version, iv, tag, body } = parse(sealed);
    if (version === LEGACY_VERSION) throw new SealedSecretError('a v1 sealed secret must be upgraded first (done at start)');
    if (version !== VERSION) throw new SealedSecretError('not a sealed secret');
    return this.#decrypt(iv, tag, body, associatedData(binding));
  }

  /** Whether a stored value is in the v1 format that `upgrade` re-seals. */
  static isLegacy(sealed: string): boolean {
    return sealed.startsWith(`${LEGACY_VERSION}:`);
  }

  /**
   * Re-seals a v1 value as v2 bound to `binding` (the row that holds it); answers a v2 value as it
   * is after checking that it opens for that row.
   */
  upgrade(sealed: string, binding: SealBinding): string {
    const { version, iv, tag, body } = parse(sealed);
    if (version === VERSION) {
      this.#decrypt(iv, tag, body, associatedData(binding));
      return sealed;
    }
    if (version !== LEGACY_VERSION) throw new SealedSecretError('not a sealed secret');
    return this.seal(this.#decrypt(iv, tag, body, undefined), binding);
  }

  #decrypt(iv: Buffer, tag: Buffer, body: Buffer, aad: Buffer | undefined): string {
    try {
      const decipher = crypto.createDecipheriv('aes-256-gcm', this.#key, iv, { authTagLength: TAG_BYTES });
      if (aad) decipher.setAAD(aad);
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(body), decipher.final()]).toString('utf8');
    } catch {
      throw new SealedSecretError('the sealed secret does not open (another master key, another row, or altered)');
    }
  }
}
