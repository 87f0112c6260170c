/**
 * Encryption at rest for private keys (TLS keys, the token signing key): AES-256-GCM under the
 * operator's master key. The master key comes from TPS_MASTER_KEY or, on a single node, is
 * generated once into the data folder (mode 0600). Losing it makes the stored keys unreadable,
 * so the demo prints where it is.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const VERSION = 'v1';

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
      fs.writeFileSync(file, crypto.randomBytes(32).toString('base64') + '\n', { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    return new SecretBox(Buffer.from(fs.readFileSync(file, 'utf8').trim(), 'base64'));
  }

  seal(plaintext: string): string {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.#key, iv);
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return [VERSION, iv.toString('base64'), cipher.getAuthTag().toString('base64'), body.toString('base64')].join(':');
  }

  open(sealed: string): string {
    const [version, iv, tag, body] = sealed.split(':');
    if (version !== VERSION || !iv || !tag || body === undefined) throw new Error('not a sealed secret');
    const decipher = crypto.createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64'));
    decipher.setAuthTag(Buffer.from(tag, 'base64'));
    return Buffer.concat([decipher.update(Buffer.from(body, 'base64')), decipher.final()]).toString('utf8');
  }
}
