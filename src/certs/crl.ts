/**
 * Certificate revocation lists of the uploaded CA certificates: each entry's `crlUrl` (http or
 * https) is fetched soon after the upload and again on a timer; a CRL is kept only when it parses
 * and is signed by that entry's CA (same issuer name, valid signature with the CA's key). A fetch
 * that fails is reported in the CA certificate resource (`certificates[].crl.error`) and the last
 * good CRL stays in use. The edge asks `crlsFor(caCertificateIds)` for the CRLs of a proxy's CAs
 * (client certificate verification with `verifyCrl`, CUSTOM_TRUSTSTORE origin validation).
 *
 * CRLs live in the store (`crl_cache`), so every edge node uses the same ones; a new CRL moves the
 * store revision, so the edge reloads it.
 */
import crypto from 'node:crypto';
// @peculiar/x509 resolves its algorithms through tsyringe, which needs the Reflect metadata polyfill first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { Store } from '../store/index.ts';
import type { CrlStatus } from '../store/certificates.ts';

// `as never`: Node's WebCrypto is the Crypto @peculiar/x509 wants, whichever lib typings are loaded.
x509.cryptoProvider.set(crypto.webcrypto as never);

export interface VerifiedCrl {
  pem: string;
  thisUpdate: string;
  nextUpdate: string | null;
  /** Serial numbers of the revoked certificates, lower-case hex as the CRL holds them. */
  revokedSerials: string[];
}

export class CrlError extends Error {}

/**
 * Parses a CRL (DER or PEM) and checks it was issued and signed by the CA `caPem`.
 * Throws CrlError saying what is wrong.
 */
export async function verifyCrl(data: Buffer | string, caPem: string): Promise<VerifiedCrl> {
  let crl: x509.X509Crl;
  try {
    const text = typeof data === 'string' ? data : data.toString('latin1');
    const pem = PEM_CRL.exec(text);
    const der = pem ? Buffer.from(pem[1]!.replace(/\s+/g, ''), 'base64') : typeof data === 'string' ? Buffer.from(data, 'latin1') : data;
    crl = new x509.X509Crl(Uint8Array.from(der));
  } catch (error) {
    throw new CrlError(`not a certificate revocation list (${(error as Error).message})`);
  }
  const ca = new x509.X509Certificate(caPem);
  if (!sameName(crl.issuerName, ca.subjectName)) {
    throw new CrlError(`the CRL was issued by "${crl.issuer}", not by the CA "${ca.subject}"`);
  }
  let signed = false;
  try {
    signed = await crl.verify({ publicKey: ca.publicKey });
  } catch {
    signed = false;
  }
  if (!signed) throw new CrlError(`the CRL's signature does not verify with the key of the CA "${ca.subject}"`);
  return {
    pem: crlPem(crl.rawData),
    thisUpdate: crl.thisUpdate.toISOString(),
    nextUpdate: crl.nextUpdate?.toISOString() ?? null,
    revokedSerials: crl.entries.map((entry) => entry.serialNumber.toLowerCase()),
  };
}

const PEM_CRL = /-----BEGIN (?:X509 )?CRL-----([\s\S]+?)-----END (?:X509 )?CRL-----/;

/** PEM with the label OpenSSL (and so node:tls `crl`) reads: "X509 CRL". */
export function crlPem(der: ArrayBuffer | Buffer): string {
  const base64 = Buffer.from(der as ArrayBuffer).toString('base64');
  return `-----BEGIN X509 CRL-----\n${base64.match(/.{1,64}/g)!.join('\n')}\n-----END X509 CRL-----\n`;
}

function sameName(a: x509.Name, b: x509.Name): boolean {
  return Buffer.from(a.toArrayBuffer()).equals(Buffer.from(b.toArrayBuffer())) || a.toString() === b.toString();
}

/** GETs a CRL with a time and size limit. */
export async function downloadCrl(url: string, options: { timeoutMs?: number; maxBytes?: number } = {}): Promise<Buffer> {
  const timeoutMs = options.timeoutMs ?? 15_000;
  const maxBytes = options.maxBytes ?? 20 * 1024 * 1024;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: 'follow' });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why =
      (error as Error).name === 'TimeoutError'
        ? `no answer within ${timeoutMs} ms`
        : cause?.message
          ? `${cause.message}${cause.code && !cause.message.includes(cause.code) ? ` (${cause.code})` : ''}`
          : (cause?.code ?? (error as Error).message);
    throw new CrlError(`GET ${url} failed: ${why}`);
  }
  if (!response.ok) {
    await response.body?.cancel().catch(() => {});
    throw new CrlError(`GET ${url} answered HTTP ${response.status}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  const reader = response.body?.getReader();
  try {
    for (;;) {
      const read = await reader?.read();
      if (!read || read.done) break;
      size += read.value.byteLength;
      if (size > maxBytes) {
        await reader!.cancel().catch(() => {});
        throw new CrlError(`GET ${url}: the CRL is larger than ${maxBytes} bytes`);
      }
      chunks.push(Buffer.from(read.value));
    }
  } catch (error) {
    if (error instanceof CrlError) throw error;
    throw new CrlError(`GET ${url} failed while reading: ${(error as Error).message}`);
  }
  return Buffer.concat(chunks);
}

/** The subset of pino's / Fastify's logger the service uses. */
export interface CrlLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
}

export interface CrlServiceOptions {
  store: Store;
  logger?: CrlLogger;
  /** Every CRL is fetched again this often (TPS_CRL_REFRESH_SECONDS; default 1 h). */
  refreshIntervalMs?: number;
  /** How often the store is checked for new CA uploads to fetch at once (default 2 s; a cheap revision read). */
  watchIntervalMs?: number;
  fetchTimeoutMs?: number;
  maxBytes?: number;
}

export class CrlService {
  readonly #store: Store;
  readonly #logger: CrlLogger | undefined;
  readonly #refreshIntervalMs: number;
  readonly #watchIntervalMs: number;
  readonly #fetch: { timeoutMs: number; maxBytes: number };
  #refreshTimer: NodeJS.Timeout | undefined;
  #watchTimer: NodeJS.Timeout | undefined;
  #seenRevision = -1;
  #running: Promise<void> | undefined;
  #again: 'none' | 'new' | 'all' = 'none';
  #stopped = false;

  constructor(options: CrlServiceOptions) {
    this.#store = options.store;
    this.#logger = options.logger;
    this.#refreshIntervalMs = options.refreshIntervalMs ?? 3600_000;
    this.#watchIntervalMs = options.watchIntervalMs ?? 2000;
    this.#fetch = { timeoutMs: options.fetchTimeoutMs ?? 15_000, maxBytes: options.maxBytes ?? 20 * 1024 * 1024 };
  }

  /** Fetches every CRL now, then on the timer; and the CRLs of new uploads as they come. */
  start(): void {
    if (this.#refreshTimer || this.#stopped) return;
    this.#refreshTimer = setInterval(() => this.#schedule('all'), this.#refreshIntervalMs);
    this.#refreshTimer.unref();
    this.#watchTimer = setInterval(() => void this.#watch(), this.#watchIntervalMs);
    this.#watchTimer.unref();
    this.#schedule('all');
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#refreshTimer);
    clearInterval(this.#watchTimer);
    await this.#running;
  }

  /** The CRLs (PEM, verified) of every entry of these CA certificates that has one. */
  async crlsFor(caCertificateIds: readonly string[]): Promise<string[]> {
    return crlsFor(this.#store, caCertificateIds);
  }

  /** Fetches every entry's CRL again (the timer's work). */
  refreshAll(): Promise<void> {
    return this.#schedule('all');
  }

  /** Fetches the CRLs not fetched yet, or whose URL changed (what an upload needs). */
  refreshNew(): Promise<void> {
    return this.#schedule('new');
  }

  async #watch(): Promise<void> {
    try {
      const revision = await this.#store.revision();
      if (revision === this.#seenRevision) return;
      this.#seenRevision = revision;
      await this.#schedule('new');
    } catch (error) {
      this.#logger?.warn({ err: error }, 'crl: reading the store failed');
    }
  }

  /** One pass at a time; a pass asked for meanwhile runs after it (the larger one wins). */
  #schedule(kind: 'new' | 'all'): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#running) {
      if (kind === 'all' || this.#again === 'none') this.#again = kind;
      return this.#running.then(() => this.#running ?? undefined);
    }
    this.#running = this.#pass(kind)
      .catch((error: unknown) => this.#logger?.warn({ err: error }, 'crl: refresh failed'))
      .finally(() => {
        this.#running = undefined;
        const again = this.#again;
        this.#again = 'none';
        if (again !== 'none') void this.#schedule(again);
      });
    return this.#running;
  }

  async #pass(kind: 'new' | 'all'): Promise<void> {
    const store = this.#store;
    await store.crlCache.purgeOrphans();
    const cached = new Map((await store.crlCache.listAll()).map((row) => [`${row.caCertificateId}|${row.entryIndex}`, row]));
    for (const record of await store.caCertificates.listAll()) {
      for (const [index, entry] of record.entries.entries()) {
        if (this.#stopped) return;
        if (!entry.crlUrl) continue;
        const known = cached.get(`${record.id}|${index}`);
        if (kind === 'new' && known && known.crlUrl === entry.crlUrl) continue;
        await this.#refreshEntry(record.id, index, entry.crlUrl, entry.certificate, known?.fetchedAt ?? null);
      }
    }
  }

  async #refreshEntry(caCertificateId: string, entryIndex: number, crlUrl: string, caPem: string, lastGood: string | null): Promise<void> {
    const store = this.#store;
    const key = { caCertificateId, entryIndex, crlUrl };
    const at = new Date().toISOString();
    // the CRL and the status the API shows are stored in one transaction
    try {
      const crl = await verifyCrl(await downloadCrl(crlUrl, this.#fetch), caPem);
      const status: CrlStatus = {
        fetchedAt: at,
        error: null,
        attemptedAt: at,
        thisUpdate: crl.thisUpdate,
        ...(crl.nextUpdate !== null && { nextUpdate: crl.nextUpdate }),
        revokedCount: crl.revokedSerials.length,
      };
      const { changed } = await store.crlCache.recordSuccess(key, crl, at, status);
      if (changed) this.#logger?.info({ caCertificateId, entryIndex, crlUrl, revoked: crl.revokedSerials.length }, 'crl: new revocation list in use');
    } catch (error) {
      const message = error instanceof CrlError ? error.message : `CRL refresh failed: ${(error as Error).message}`;
      // a failure leaves the last good CRL (and its dates) as it is
      const previous = (await store.crlCache.list([caCertificateId])).find((row) => row.entryIndex === entryIndex);
      const status: CrlStatus = {
        fetchedAt: previous?.fetchedAt ?? lastGood,
        error: message,
        attemptedAt: at,
        ...(previous?.thisUpdate && { thisUpdate: previous.thisUpdate }),
        ...(previous?.nextUpdate && { nextUpdate: previous.nextUpdate }),
      };
      await store.crlCache.recordFailure(key, message, at, status);
      this.#logger?.warn({ caCertificateId, entryIndex, crlUrl, error: message, keptFrom: status.fetchedAt }, 'crl: fetch failed; the last good CRL stays in use');
    }
  }
}

/** The verified CRLs (PEM) of these CA certificates, from the store: what the edge runtime loads. */
export async function crlsFor(store: Store, caCertificateIds: readonly string[]): Promise<string[]> {
  const rows = await store.crlCache.list([...new Set(caCertificateIds)]);
  return rows.flatMap((row) => (row.crlPem ? [row.crlPem] : []));
}
