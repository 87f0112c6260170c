/**
 * Certificate revocation lists of the uploaded CA certificates: each entry's `crlUrl` (http or
 * https) is fetched soon after the upload and again on a timer; a CRL is kept only when it parses
 * and is signed by that entry's CA (same issuer name, valid signature with the CA's key). A fetch
 * that fails is reported in the CA certificate resource (`certificates[].crl.error`) and the last
 * good CRL stays in use. The edge asks `crlsFor(caCertificateIds)` for the CRLs of a proxy's CAs
 * (client certificate verification with `verifyCrl`, CUSTOM_TRUSTSTORE origin validation).
 *
 * A `crlUrl` is the tenant's, so fetching it is connecting on a tenant's behalf:
 * - every connection (the first and each redirect's) goes through the origin policy
 *   (src/net/origin-guard.ts); a refused address is never connected to;
 * - the tenant sees one generic error for every failed fetch (refused, unreachable, timed out, an
 *   HTTP status, too large, an answer that is no CRL), so a `crlUrl` cannot be used to probe what
 *   answers where; the reason goes to the operator's log and to `tps_crl_fetch_failures_total`.
 *   Only a real CRL that is not the CA's (issuer, signature) is described, as it concerns the
 *   tenant's own CA;
 * - fetches are bounded: a few at a time (`concurrency`, TPS_CRL_FETCHES), a total time (connect,
 *   redirects and body: TPS_CRL_FETCH_TIMEOUT_SECONDS) and a size (TPS_CRL_MAX_BYTES);
 * - fetches are fair between tenants (tenant-lanes.ts): each tenant's run in a lane of their own,
 *   at most `concurrencyPerTenant` at once (TPS_CRL_FETCHES_PER_TENANT), so one tenant's slow or
 *   failing distribution points hold its own lane only, and another tenant's new CA certificate
 *   (whose mutual-TLS proxies refuse client certificates until its CRL is in) is fetched at once;
 * - the CRL is parsed and checked in a thread of its own (crl-verifier.ts), never on the event loop
 *   that answers the API.
 *
 * CRLs live in the store (`crl_cache`), so every edge node uses the same ones; a new CRL moves the
 * store revision, so the edge reloads it.
 */
import { Agent, request, type Dispatcher } from 'undici';
import { Counter, type Registry } from 'prom-client';
import type { Store } from '../store/index.ts';
import type { CrlStatus } from '@tps/model';
import { isOriginRefused, type OriginGuard, type ScopedOriginGuard } from '../net/origin-guard.ts';
import { CrlError } from './crl-verify.ts';
import { CrlVerifier } from './crl-verifier.ts';
import { TenantLanes } from './tenant-lanes.ts';

export { CrlError, crlPem, verifyCrl, type VerifiedCrl } from './crl-verify.ts';

/** What the tenant is told about any fetch that failed; the operator's log has the reason. */
export const CRL_FETCH_FAILED =
  "the CRL could not be fetched from crlUrl (the service's operators have the reason); the last good CRL, if any, stays in use";

/** Why a fetch failed, as counted (`tps_crl_fetch_failures_total{reason}`). */
export type CrlFetchFailure = 'origin-refused' | 'status' | 'redirects' | 'too-large' | 'timeout' | 'network';

/** A fetch that failed: `message` is for the operator only. */
export class CrlFetchError extends Error {
  readonly reason: CrlFetchFailure;
  constructor(reason: CrlFetchFailure, message: string) {
    super(message);
    this.reason = reason;
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** Redirects followed from a crlUrl; each one's target is checked by the origin policy. */
export const MAX_CRL_REDIRECTS = 3;

export interface CrlDownloadOptions {
  /** Opens every connection (through `dispatcherFor`): the origin policy checks each address. */
  dispatcher: Dispatcher;
  /** The whole fetch: connects, redirects and body. */
  timeoutMs: number;
  maxBytes: number;
}

/** An undici dispatcher whose every connection goes through the origin policy. */
export function crlDispatcher(guard: ScopedOriginGuard, connectTimeoutMs: number): Agent {
  return new Agent({
    connections: 2,
    keepAliveTimeout: 1_000,
    connect: (options, callback) => {
      const port = Number(options.port) || (options.protocol === 'https:' ? 443 : 80);
      guard.undiciConnector(options.hostname, port, { timeout: connectTimeoutMs })(options, callback);
    },
  });
}

/** GETs a CRL: redirects followed (at most MAX_CRL_REDIRECTS), within a time and a size limit. Throws CrlFetchError. */
export async function downloadCrl(url: string, options: CrlDownloadOptions): Promise<Buffer> {
  const { timeoutMs, maxBytes } = options;
  const signal = AbortSignal.timeout(timeoutMs);
  let current = new URL(url);
  for (let redirects = 0; ; redirects++) {
    if (current.protocol !== 'http:' && current.protocol !== 'https:') {
      throw new CrlFetchError('redirects', `GET ${url}: redirected to ${current.href}, not an http(s) URL`);
    }
    let response: Dispatcher.ResponseData;
    try {
      response = await request(current, {
        dispatcher: options.dispatcher,
        method: 'GET',
        signal,
        headers: { accept: 'application/pkix-crl, */*' },
      });
    } catch (error) {
      throw failure(url, current, error, timeoutMs);
    }
    const { statusCode, headers, body } = response;
    if (REDIRECTS.has(statusCode)) {
      await body.dump().catch(() => {});
      const location = headers.location;
      if (typeof location !== 'string' || redirects >= MAX_CRL_REDIRECTS) {
        throw new CrlFetchError(
          'redirects',
          `GET ${url}: ${typeof location !== 'string' ? `HTTP ${statusCode} without a Location` : `more than ${MAX_CRL_REDIRECTS} redirects`}`,
        );
      }
      current = new URL(location, current);
      continue;
    }
    if (statusCode < 200 || statusCode > 299) {
      await body.dump().catch(() => {});
      throw new CrlFetchError('status', `GET ${current.href}${current.href === url ? '' : ` (from ${url})`} answered HTTP ${statusCode}`);
    }
    const declared = Number(headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBytes) {
      discard(body);
      throw new CrlFetchError('too-large', `GET ${current.href}: the CRL is ${declared} bytes, more than ${maxBytes}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxBytes) {
          discard(body);
          throw new CrlFetchError('too-large', `GET ${current.href}: the CRL is larger than ${maxBytes} bytes`);
        }
        chunks.push(chunk);
      }
    } catch (error) {
      if (error instanceof CrlFetchError) throw error;
      throw failure(url, current, error, timeoutMs);
    }
    return Buffer.concat(chunks, size);
  }
}

/** Drops the rest of a response body (the connection closes); its abort is expected, not an error. */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => {});
  body.destroy();
}

function failure(url: string, current: URL, error: unknown, timeoutMs: number): CrlFetchError {
  const where = `GET ${current.href}${current.href === url ? '' : ` (from ${url})`}`;
  if (isOriginRefused(error)) return new CrlFetchError('origin-refused', `${where}: ${error.message}`);
  const name = (error as Error).name;
  const code = (error as NodeJS.ErrnoException).code;
  if (name === 'TimeoutError' || name === 'AbortError' || code === 'UND_ERR_ABORTED' || code === 'UND_ERR_CONNECT_TIMEOUT') {
    return new CrlFetchError('timeout', `${where}: no CRL within ${timeoutMs} ms`);
  }
  const message = (error as Error).message;
  return new CrlFetchError('network', `${where} failed: ${code && !message.includes(code) ? `${message} (${code})` : message}`);
}

/** The subset of pino's / Fastify's logger the service uses. */
export interface CrlLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
}

export interface CrlServiceOptions {
  store: Store;
  logger?: CrlLogger;
  /**
   * Where CRLs may be fetched from: the origin policy, as for proxies' origins. No default: tests
   * with a loopback distribution point pass a permissive one of their own.
   */
  originGuard: OriginGuard;
  /** Every CRL is fetched again this often (TPS_CRL_REFRESH_SECONDS; default 1 h). */
  refreshIntervalMs?: number;
  /** How often the store is checked for new CA uploads to fetch at once (default 2 s; a cheap revision read). */
  watchIntervalMs?: number;
  /** One fetch, whole (TPS_CRL_FETCH_TIMEOUT_SECONDS; default 10 s). */
  fetchTimeoutMs?: number;
  /** TPS_CRL_MAX_BYTES; default 1 MiB. */
  maxBytes?: number;
  /** Fetches at a time, all tenants (default 16): many slow CRLs hold no more connections and buffers than this. */
  concurrency?: number;
  /** Fetches at a time of one tenant (default 2): its slow CRLs leave the other slots to the other tenants. */
  concurrencyPerTenant?: number;
  /** Checks CRLs off the event loop; default a `CrlVerifier` of the service's own. */
  verifier?: CrlVerifier;
  /** Prometheus registry for `tps_crl_fetch_failures_total`. */
  registry?: Registry;
}

export class CrlService {
  readonly #store: Store;
  readonly #logger: CrlLogger | undefined;
  readonly #refreshIntervalMs: number;
  readonly #watchIntervalMs: number;
  readonly #fetch: CrlDownloadOptions;
  readonly #dispatcher: Agent;
  readonly #lanes: TenantLanes;
  readonly #verifier: CrlVerifier;
  readonly #failures: Counter<'reason'> | undefined;
  #refreshTimer: NodeJS.Timeout | undefined;
  #watchTimer: NodeJS.Timeout | undefined;
  #seenRevision = -1;
  #stopped = false;

  constructor(options: CrlServiceOptions) {
    this.#store = options.store;
    this.#logger = options.logger;
    this.#refreshIntervalMs = options.refreshIntervalMs ?? 3600_000;
    this.#watchIntervalMs = options.watchIntervalMs ?? 2000;
    const timeoutMs = options.fetchTimeoutMs ?? 10_000;
    this.#dispatcher = crlDispatcher(options.originGuard.for('crl'), timeoutMs);
    this.#fetch = { dispatcher: this.#dispatcher, timeoutMs, maxBytes: options.maxBytes ?? 1024 * 1024 };
    this.#lanes = new TenantLanes({
      total: options.concurrency ?? 16,
      perTenant: options.concurrencyPerTenant ?? 2,
      // #refreshEntry records its own failures; this is a store write that failed.
      onError: (error, job) => this.#logger?.warn({ err: error, entry: job.key }, 'crl: refresh failed'),
    });
    // Checking a CRL takes heap in proportion to its size: room for the largest one the size limit
    // lets through (docs/benchmarks.md, "CRL check"), never less than the verifier's default.
    const maxHeapMb = Math.max(256, Math.ceil((this.#fetch.maxBytes / (1024 * 1024)) * 256));
    this.#verifier = options.verifier ?? new CrlVerifier({ maxHeapMb });
    this.#failures =
      options.registry &&
      new Counter({
        name: 'tps_crl_fetch_failures_total',
        help: "CA certificates' CRL fetches or checks that failed, by reason (origin-refused, status, redirects, too-large, timeout, network, not-a-crl, not-this-ca, check-failed).",
        labelNames: ['reason'],
        registers: [options.registry],
      });
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
    await this.#lanes.stop();
    await this.#verifier.close();
    await this.#dispatcher.close().catch(() => {});
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
      // Not awaited: the jobs run in their lanes; the next look at the store need not wait for them.
      void this.#schedule('new');
    } catch (error) {
      this.#logger?.warn({ err: error }, 'crl: reading the store failed');
    }
  }

  /**
   * Adds the fetches a pass needs to the tenants' lanes (an entry already waiting or running is not
   * added again) and resolves once they have run.
   */
  async #schedule(kind: 'new' | 'all'): Promise<void> {
    if (this.#stopped) return;
    let jobs: Promise<void>[];
    try {
      jobs = await this.#collect(kind);
    } catch (error) {
      this.#logger?.warn({ err: error }, 'crl: reading the store failed');
      return;
    }
    await Promise.all(jobs);
  }

  async #collect(kind: 'new' | 'all'): Promise<Promise<void>[]> {
    const store = this.#store;
    await store.crlCache.purgeOrphans();
    const cached = new Map((await store.crlCache.listAll()).map((row) => [`${row.caCertificateId}|${row.entryIndex}`, row]));
    const jobs: Promise<void>[] = [];
    for (const record of await store.caCertificates.listAll()) {
      for (const [index, entry] of record.entries.entries()) {
        const crlUrl = entry.crlUrl;
        if (!crlUrl) continue;
        const known = cached.get(`${record.id}|${index}`);
        if (kind === 'new' && known && known.crlUrl === crlUrl) continue;
        jobs.push(
          this.#lanes.add({
            tenantId: record.tenantId,
            key: `${record.id}|${index}|${crlUrl}`,
            run: () => this.#refreshEntry(record.id, index, crlUrl, entry.certificate, known?.fetchedAt ?? null),
          }),
        );
      }
    }
    return jobs;
  }

  async #refreshEntry(caCertificateId: string, entryIndex: number, crlUrl: string, caPem: string, lastGood: string | null): Promise<void> {
    const store = this.#store;
    const key = { caCertificateId, entryIndex, crlUrl };
    const at = new Date().toISOString();
    // the CRL and the status the API shows are stored in one transaction
    try {
      const crl = await this.#verifier.verify(await downloadCrl(crlUrl, this.#fetch), caPem);
      const status: CrlStatus = {
        fetchedAt: at,
        error: null,
        attemptedAt: at,
        thisUpdate: crl.thisUpdate,
        ...(crl.nextUpdate !== null && { nextUpdate: crl.nextUpdate }),
        revokedCount: crl.revokedSerials.length,
      };
      const { changed } = await store.crlCache.recordSuccess(key, crl, at, status);
      if (changed)
        this.#logger?.info({ caCertificateId, entryIndex, crlUrl, revoked: crl.revokedSerials.length }, 'crl: new revocation list in use');
    } catch (error) {
      // A failed fetch says nothing to the tenant beyond that it failed (see the module comment).
      const described = error instanceof CrlError && error.problem === 'not-this-ca';
      const message = described ? error.message : CRL_FETCH_FAILED;
      this.#failures?.inc({
        reason: error instanceof CrlFetchError ? error.reason : error instanceof CrlError ? error.problem : 'check-failed',
      });
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
      this.#logger?.warn(
        {
          caCertificateId,
          entryIndex,
          crlUrl,
          error: (error as Error).message,
          ...(error instanceof CrlFetchError && { reason: error.reason }),
          keptFrom: status.fetchedAt,
        },
        'crl: fetch failed; the last good CRL stays in use',
      );
    }
  }
}

/** The verified CRLs (PEM) of these CA certificates, from the store: what the edge runtime loads. */
export async function crlsFor(store: Store, caCertificateIds: readonly string[]): Promise<string[]> {
  const rows = await store.crlCache.list([...new Set(caCertificateIds)]);
  return rows.flatMap((row) => (row.crlPem ? [row.crlPem] : []));
}
