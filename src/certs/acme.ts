/**
 * Service-issued certificates: the ACME client (acme-client, RFC 8555) that orders, and renews,
 * every `source: ACME` certificate in the background.
 *
 * - Work lives in the store, so any node can do it and a restart loses nothing: a PENDING record
 *   is ordered; an ISSUED record is renewed once `renew_after` passed (30 days after issuance) or
 *   when an operator asks. A lease on the record keeps two nodes from ordering at once.
 * - One ACME account per tenant (and directory URL), registered on the tenant's first order and
 *   stored (key sealed): the CA's per-account limits count each tenant's orders apart, so one
 *   tenant cannot use them up for the others. When the CA says the account is deactivated or
 *   unknown, a new one is registered and the attempt repeated.
 * - Challenges go to the store (`acme_challenges`, with the ordering tenant), where every edge
 *   node's proxies of that tenant find them: HTTP-01 on port 80 while a plain HTTP proxy of the
 *   tenant listens there; TLS-ALPN-01 on the TLS port when port 80 is gone and a proxy serves this
 *   certificate.
 * - The key pair is generated here (EC P-256), sealed with the master key, never shown.
 * - Outcome: ISSUED with the chain and its X.509 facts (the same record, so proxies serve a renewed
 *   certificate after the edge reloads; the store revision moves), or FAILED with the CA's reason.
 *   CA rate limits, CA errors and network failures are retried with exponential backoff (honouring
 *   Retry-After); a first issuance gives up after `maxIssuanceAttempts`; a renewal never gives up
 *   (the certificate in use stays served), and every failed renewal is logged as an error, counted
 *   in `tps_acme_renewal_failures_total` and shown in statusDetail.
 */
import crypto, { X509Certificate } from 'node:crypto';
import https from 'node:https';
import tls from 'node:tls';
import acme from 'acme-client';
import { Counter, type Registry } from 'prom-client';
import type { Store } from '../store/index.ts';
import type { CertificateRecord } from '../store/certificates.ts';
import type { AcmeOrderLimits } from '../store/acme-order-checks.ts';
import type { AcmeChallengeType } from '../store/acme-challenges.ts';
import type { HttpProxyAttributes } from '@tps/model';
import { certificateKeyBinding, type SecretBox } from './secret-box.ts';
import { certificateFacts, pemBlocks } from './x509.ts';
import { normalizeDomain } from './acme-challenges.ts';
import { AcmeFailure, callCa, callContext, classify, installAdapter, type CallContext, type ProblemNote } from './acme-failures.ts';
import { AcmeAccounts, type AccountInUse } from './acme-accounts.ts';

export { AcmeFailure };

export const LETS_ENCRYPT_DIRECTORY_URL = 'https://acme-v02.api.letsencrypt.org/directory';

/** The subset of pino's / Fastify's logger the service uses. */
export interface AcmeLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
}

export interface AcmeServiceOptions {
  store: Store;
  secrets: SecretBox;
  /** ACME directory URL (TPS_ACME_DIRECTORY_URL). */
  directoryUrl: string;
  /** Account contact (TPS_ACME_EMAIL). */
  email?: string | undefined;
  /** Extra CA certificates (PEM) to trust for the directory's HTTPS, besides the system ones (TPS_ACME_CA_BUNDLE). */
  caBundlePem?: string | undefined;
  /** Names this node in the work leases. */
  nodeId?: string;
  logger?: AcmeLogger;
  /** Prometheus registry for the ACME counters. */
  registry?: Registry;
  /** Orders run at the same time (default 2). */
  concurrency?: number;
  /** How often the store is scanned for due work (default 30 s); `enqueue` scans at once. */
  scanIntervalMs?: number;
  /** Renewal this long after issuance (default 30 days; earlier for certificates living under 45 days). */
  renewAfterMs?: number;
  /** Backoff of failed attempts: base, doubled per attempt, capped (defaults 1 min and 6 h). */
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** A first issuance failing this many times for passing reasons (network, CA errors) becomes FAILED (default 8). */
  maxIssuanceAttempts?: number;
  /** Names per certificate the CA accepts (default 100, Let's Encrypt's classic profile; 25 for its short-lived profiles). */
  maxNames?: number;
  /** Polling of challenges and orders at the CA (acme-client backoff): attempts, first and largest delay. */
  pollAttempts?: number;
  pollMinMs?: number;
  pollMaxMs?: number;
  /** One HTTP request to the CA may take this long (default 30 s). */
  requestTimeoutMs?: number;
  /** The lease on a record while an order runs (default 10 min, extended while it runs). */
  leaseMs?: number;
  /** Port the CA validates HTTP-01 on (80): a plain HTTP proxy of the tenant there answers it. */
  httpChallengePort?: number;
}

export class AcmeService {
  readonly #o: Required<Omit<AcmeServiceOptions, 'email' | 'caBundlePem' | 'registry' | 'logger'>> &
    Pick<AcmeServiceOptions, 'email' | 'logger'>;
  readonly #agent: https.Agent | undefined;
  readonly #owner: string;
  readonly #running = new Map<string, Promise<void>>();
  /** The tenants' ACME accounts at the directory. */
  readonly #accounts: AcmeAccounts;
  #timer: NodeJS.Timeout | undefined;
  #scanning: Promise<void> | undefined;
  #rescan = false;
  #stopped = false;
  #lastPurge = 0;
  readonly #counters: { orders: Counter<'result'>; renewalFailures: Counter } | undefined;

  constructor(options: AcmeServiceOptions) {
    installAdapter();
    this.#o = {
      store: options.store,
      secrets: options.secrets,
      directoryUrl: options.directoryUrl,
      email: options.email,
      logger: options.logger,
      nodeId: options.nodeId ?? 'node',
      concurrency: options.concurrency ?? 2,
      scanIntervalMs: options.scanIntervalMs ?? 30_000,
      renewAfterMs: options.renewAfterMs ?? 30 * 24 * 3600_000,
      retryBaseMs: options.retryBaseMs ?? 60_000,
      retryMaxMs: options.retryMaxMs ?? 6 * 3600_000,
      maxIssuanceAttempts: options.maxIssuanceAttempts ?? 8,
      maxNames: options.maxNames ?? 100,
      pollAttempts: options.pollAttempts ?? 10,
      pollMinMs: options.pollMinMs ?? 3000,
      pollMaxMs: options.pollMaxMs ?? 30_000,
      requestTimeoutMs: options.requestTimeoutMs ?? 30_000,
      leaseMs: options.leaseMs ?? 10 * 60_000,
      httpChallengePort: options.httpChallengePort ?? 80,
    };
    this.#agent = options.caBundlePem
      ? new https.Agent({ ca: [...tls.rootCertificates, ...pemBlocks(options.caBundlePem)], keepAlive: true, maxSockets: 8 })
      : undefined;
    this.#owner = `${this.#o.nodeId}:${crypto.randomUUID()}`;
    this.#accounts = new AcmeAccounts({
      store: options.store,
      secrets: options.secrets,
      directoryUrl: options.directoryUrl,
      email: options.email,
      logger: options.logger,
      context: () => this.#context(),
      client: (account) => this.#client(account),
    });
    this.#counters = options.registry && {
      orders: new Counter({
        name: 'tps_acme_orders_total',
        help: 'ACME attempts by result: issued, renewed, failed (for good), retry (will be retried), renewal_failed.',
        labelNames: ['result'],
        registers: [options.registry],
      }),
      renewalFailures: new Counter({
        name: 'tps_acme_renewal_failures_total',
        help: 'Failed renewals of service-issued certificates (each one is also logged as an error).',
        registers: [options.registry],
      }),
    };
  }

  /** Starts scanning the store for due work: now, then every scanIntervalMs. */
  start(): void {
    if (this.#timer || this.#stopped) return;
    this.#timer = setInterval(() => this.#kick(), this.#o.scanIntervalMs);
    this.#timer.unref();
    this.#kick();
  }

  /** A certificate was created or needs work now (the API calls this after `createAcme`). */
  enqueue(_certificateId?: string): void {
    this.#kick();
  }

  /**
   * The operator's "renew now": an ISSUED certificate is renewed at once, a FAILED one ordered
   * again within `limits` (else AcmeOrderRefused). Undefined when the tenant has no such
   * service-issued certificate.
   */
  async renewNow(tenantId: string, certificateId: string, limits: AcmeOrderLimits = {}): Promise<CertificateRecord | undefined> {
    const record = await this.#o.store.certificates.requestRenewal(tenantId, certificateId, limits);
    if (record) this.#kick();
    return record;
  }

  /**
   * Stops scanning; waits up to `graceMs` for running orders, then gives up the leases of those
   * still running, so that the next start (or another node) takes them up at once instead of
   * after the lease (a restart while PENDING must not hold the order for minutes).
   */
  async stop(graceMs = 5000): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([this.#scanning, ...this.#running.values()]),
      new Promise((resolve) => (timer = setTimeout(resolve, graceMs))),
    ]);
    clearTimeout(timer);
    for (const id of this.#running.keys()) await this.#o.store.certificates.releaseAcme(id, this.#owner).catch(() => {});
    this.#agent?.destroy();
  }

  /** Resolves once no scan and no order runs (for tests and orderly shutdowns). */
  async idle(): Promise<void> {
    while (this.#scanning || this.#running.size > 0) {
      await Promise.allSettled([this.#scanning, ...this.#running.values()]);
    }
  }

  #kick(): void {
    if (this.#stopped) return;
    if (this.#scanning) {
      this.#rescan = true;
      return;
    }
    this.#scanning = this.#scan()
      .catch((error: unknown) => this.#o.logger?.warn({ err: error }, 'acme: scanning the store failed'))
      .finally(() => {
        this.#scanning = undefined;
        if (this.#rescan) {
          this.#rescan = false;
          this.#kick();
        }
      });
  }

  async #scan(): Promise<void> {
    const { store } = this.#o;
    const now = new Date();
    if (now.getTime() - this.#lastPurge > 60_000) {
      this.#lastPurge = now.getTime();
      await store.acmeChallenges.purgeExpired(now.toISOString());
    }
    for (const id of await store.certificates.expireStaleOrders(now)) {
      this.#counters?.orders.inc({ result: 'failed' });
      this.#o.logger?.warn({ certificateId: id }, 'acme: certificate request failed: not issued before its claim on the names ended');
    }
    const free = this.#o.concurrency - this.#running.size;
    if (free <= 0) return;
    const due = await store.certificates.dueForAcme(now.toISOString(), free);
    for (const record of due) {
      if (this.#stopped || this.#running.size >= this.#o.concurrency) break;
      if (this.#running.has(record.id)) continue;
      const claimed = await store.certificates.claimAcme(record.id, this.#owner, this.#leaseUntil(), new Date().toISOString());
      if (!claimed) continue;
      const job = this.#work(record).finally(() => {
        this.#running.delete(record.id);
        this.#kick();
      });
      this.#running.set(record.id, job);
    }
  }

  #leaseUntil(): string {
    return new Date(Date.now() + this.#o.leaseMs).toISOString();
  }

  /** One attempt on one record, with its outcome written back. Never throws. */
  async #work(record: CertificateRecord): Promise<void> {
    const { store, logger } = this.#o;
    const renewal = record.status === 'ISSUED';
    const keepLease = setInterval(
      () => {
        void store.certificates.claimAcme(record.id, this.#owner, this.#leaseUntil(), new Date().toISOString()).catch(() => {});
      },
      Math.max(1000, this.#o.leaseMs / 3),
    );
    keepLease.unref();
    try {
      const issued = await this.#attemptWithAccount(record);
      const saved = await store.certificates.markIssued(record.id, issued.material, issued.facts, this.#renewAfter(issued.facts));
      this.#counters?.orders.inc({ result: renewal ? 'renewed' : 'issued' });
      logger?.info(
        {
          certificateId: record.id,
          tenantId: record.tenantId,
          domains: record.domains,
          notAfter: issued.facts.notAfter,
          renewal,
          saved: saved !== undefined,
        },
        renewal ? 'acme: certificate renewed' : 'acme: certificate issued',
      );
    } catch (error) {
      await this.#failed(
        record,
        error instanceof AcmeFailure ? error : new AcmeFailure('transient', (error as Error)?.message ?? String(error)),
        renewal,
      ).catch((writeError: unknown) => logger?.error({ err: writeError, certificateId: record.id }, 'acme: recording a failure failed'));
    } finally {
      clearInterval(keepLease);
      await store.acmeChallenges.deleteForCertificate(record.id).catch(() => {});
      await store.certificates.releaseAcme(record.id, this.#owner).catch(() => {});
    }
  }

  async #failed(record: CertificateRecord, failure: AcmeFailure, renewal: boolean): Promise<void> {
    const { store, logger } = this.#o;
    const attempts = (record.acme?.attempts ?? 0) + 1;
    if (!renewal && (failure.kind === 'final' || attempts >= this.#o.maxIssuanceAttempts)) {
      const detail = failure.kind === 'final' ? failure.message : `gave up after ${attempts} attempts: ${failure.message}`;
      await store.certificates.markFailed(record.id, detail);
      this.#counters?.orders.inc({ result: 'failed' });
      logger?.warn(
        { certificateId: record.id, tenantId: record.tenantId, domains: record.domains, detail },
        'acme: certificate request failed',
      );
      return;
    }
    // Backoff: base * 2^(attempts-1), capped, with a little jitter; a rate limit's Retry-After wins
    // when later. A renewal that failed for good (say, no proxy answers the challenge any more) is
    // retried at the capped delay: the operator may fix it meanwhile.
    const exponential = Math.min(this.#o.retryMaxMs, this.#o.retryBaseMs * 2 ** Math.min(attempts - 1, 30));
    const base = failure.kind === 'final' ? this.#o.retryMaxMs : exponential;
    const delay = Math.max(base * (0.9 + Math.random() * 0.2), failure.retryAfterMs ?? 0);
    const nextAttemptAt = new Date(Date.now() + delay).toISOString();
    const detail = renewal
      ? `renewal failed (attempt ${attempts}): ${failure.message}; next attempt at ${nextAttemptAt}; the current certificate stays in use until ${record.notAfter ?? 'its expiry'}`
      : `attempt ${attempts} failed: ${failure.message}; next attempt at ${nextAttemptAt}`;
    await store.certificates.markAttemptFailed(record.id, {
      detail,
      renewalError: renewal ? failure.message : null,
      attempts,
      nextAttemptAt,
    });
    if (renewal) {
      this.#counters?.renewalFailures.inc();
      this.#counters?.orders.inc({ result: 'renewal_failed' });
      logger?.error(
        {
          certificateId: record.id,
          tenantId: record.tenantId,
          domains: record.domains,
          attempts,
          nextAttemptAt,
          notAfter: record.notAfter,
          detail: failure.message,
        },
        'acme: certificate renewal failed',
      );
    } else {
      this.#counters?.orders.inc({ result: 'retry' });
      logger?.warn(
        { certificateId: record.id, tenantId: record.tenantId, attempts, nextAttemptAt, detail: failure.message },
        'acme: attempt failed, will retry',
      );
    }
  }

  /**
   * Renew at 30 days of age, or at two thirds of the lifetime for short-lived certificates; never
   * within the hour (a CA issuing oddly dated certificates must not be asked again and again).
   */
  #renewAfter(facts: { notBefore: string; notAfter: string }): string {
    const notBefore = Date.parse(facts.notBefore);
    const lifetime = Date.parse(facts.notAfter) - notBefore;
    const due = notBefore + Math.min(this.#o.renewAfterMs, (lifetime * 2) / 3);
    return new Date(Math.max(due, Date.now() + 3600_000)).toISOString();
  }

  async #attemptWithAccount(record: CertificateRecord) {
    this.#precheck(record);
    const { tenantId } = record;
    const account = await this.#accounts.get(tenantId);
    try {
      return await this.#order(record, account);
    } catch (error) {
      if (!(error instanceof AcmeFailure) || error.kind !== 'account') throw error;
      // The CA no longer knows the account (deactivated, or its key revoked): register a new one, once.
      this.#o.logger?.warn(
        { tenantId, accountUrl: account.url, detail: error.message },
        'acme: the CA refused the account; registering a new one',
      );
      await this.#accounts.forget(tenantId, account);
      const fresh = await this.#accounts.get(tenantId);
      try {
        return await this.#order(record, fresh);
      } catch (again) {
        if (again instanceof AcmeFailure && again.kind === 'account') throw new AcmeFailure('transient', again.message);
        throw again;
      }
    }
  }

  /** Checks that need no CA: a refused order still counts against the CA's rate limits. */
  #precheck(record: CertificateRecord): void {
    if (record.domains.length === 0) throw new AcmeFailure('final', 'the certificate names no domain');
    if (record.domains.length > this.#o.maxNames) {
      throw new AcmeFailure(
        'final',
        `the certificate names ${record.domains.length} domains; the CA accepts at most ${this.#o.maxNames} per certificate`,
      );
    }
    const wildcard = record.domains.find((domain) => domain.includes('*'));
    if (wildcard) throw new AcmeFailure('final', `${wildcard}: wildcard names need DNS-01 validation, which this service does not offer`);
  }

  #context(): CallContext {
    return { agent: this.#agent, timeoutMs: this.#o.requestTimeoutMs, last: undefined };
  }

  /** Runs one acme-client call; its failure becomes an AcmeFailure naming `step`. */
  #call<T>(context: CallContext, step: string, call: () => Promise<T>): Promise<T> {
    return callCa(context, step, call);
  }

  #client(account: { url?: string; keyPem: string }): acme.Client {
    return new acme.Client({
      directoryUrl: this.#o.directoryUrl,
      accountKey: account.keyPem,
      ...(account.url !== undefined && { accountUrl: account.url }),
      backoffAttempts: this.#o.pollAttempts,
      backoffMin: this.#o.pollMinMs,
      backoffMax: this.#o.pollMaxMs,
    });
  }

  /**
   * Which challenge to answer, in order of preference, from the tenant's proxies in the store. A
   * proxy PUT with this certificate while it is pending still serves its interim attributes (port
   * 80, in the spec's procedure): those count as served.
   */
  async challengeTypes(record: CertificateRecord): Promise<AcmeChallengeType[]> {
    const configs = await this.#o.store.trafficConfigs.list(record.tenantId);
    const httpConfigs = configs.filter((config) => config.type === 'httpProxy');
    const http = httpConfigs.map((config) => config.attributes as HttpProxyAttributes);
    const served = [
      ...http,
      ...httpConfigs.flatMap((config) => (config.interimAttributes ? [config.interimAttributes as HttpProxyAttributes] : [])),
    ];
    const plainOnPort80 = served.some(
      (attributes) => attributes.frontend.port === this.#o.httpChallengePort && !attributes.frontend.certificateId,
    );
    if (plainOnPort80) return ['http-01', 'tls-alpn-01'];
    const servesThis = http.some((attributes) => attributes.frontend.certificateId === record.id);
    return servesThis ? ['tls-alpn-01', 'http-01'] : ['http-01', 'tls-alpn-01'];
  }

  async #order(record: CertificateRecord, account: AccountInUse) {
    const context = this.#context();
    return callContext.run(context, async () => {
      const { store } = this.#o;
      const client = this.#client(account);
      const call = <T>(step: string, run: () => Promise<T>) => this.#call(context, step, run);
      const preference = await this.challengeTypes(record);

      let order = await call('creating the order', () =>
        client.createOrder({ identifiers: record.domains.map((value) => ({ type: 'dns', value })) }),
      );
      const authorizations = await call('reading the authorizations', () => client.getAuthorizations(order));

      // Publish every challenge first, then let the CA validate them all, then wait for each.
      const started: { domain: string; type: string; challenge: (typeof authorizations)[number]['challenges'][number] }[] = [];
      for (const authorization of authorizations) {
        const domain = normalizeDomain(authorization.identifier.value);
        if (authorization.status === 'valid') continue;
        if (authorization.status !== 'pending') {
          throw new AcmeFailure('final', `the authorization for ${domain} is ${authorization.status}`);
        }
        const type = preference.find((wanted) => authorization.challenges.some((challenge) => challenge.type === wanted));
        const challenge = authorization.challenges.find((candidate) => candidate.type === type);
        if (!type || !challenge) {
          throw new AcmeFailure('final', `the CA offers no ${preference.join(' or ')} challenge for ${domain}`);
        }
        const keyAuthorization = await call('computing the key authorization', () => client.getChallengeKeyAuthorization(challenge));
        await store.acmeChallenges.put({
          type: type as AcmeChallengeType,
          token: (challenge as { token: string }).token,
          tenantId: record.tenantId,
          domain,
          keyAuthorization,
          certificateId: record.id,
          expiresAt: new Date(Date.now() + Math.max(this.#o.leaseMs, 3600_000)).toISOString(),
        });
        started.push({ domain, type, challenge });
      }
      for (const { domain, challenge } of started) {
        await call(`asking the CA to validate ${domain}`, () => client.completeChallenge(challenge));
      }
      for (const { domain, type, challenge } of started) {
        context.last = undefined;
        try {
          await client.waitForValidStatus(challenge);
        } catch (error) {
          const failure = classify(error, context, `validating ${domain}`);
          // Narrowing thinks `last` is still undefined; acme-client's requests set it meanwhile.
          const last = context.last as ProblemNote | undefined;
          if ((last?.status !== undefined && last.status >= 400) || last?.network !== undefined) throw failure;
          throw await this.#challengeFailure(context, client, order, domain, type, error as Error);
        }
      }

      const keyPem = crypto
        .generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
        .privateKey.export({ format: 'pem', type: 'pkcs8' })
        .toString();
      const commonName = record.domains.find((domain) => domain.length <= 64);
      const [, csr] = await acme.crypto.createCsr(
        { ...(commonName !== undefined && { commonName }), altNames: [...record.domains] },
        keyPem,
      );
      order = await call('finalizing the order', () => client.finalizeOrder(order, csr));
      const chain = await call('downloading the certificate', () => client.getCertificate(order));

      const [leafPem, ...intermediates] = pemBlocks(chain);
      if (!leafPem) throw new AcmeFailure('transient', 'the CA returned no certificate');
      const leaf = new X509Certificate(leafPem);
      if (!leaf.checkPrivateKey(crypto.createPrivateKey(keyPem)))
        throw new AcmeFailure('final', 'the CA returned a certificate for another key');
      return {
        material: {
          certificatePem: leaf.toString(),
          chainPem: intermediates.join(''),
          sealedPrivateKey: this.#o.secrets.seal(keyPem, certificateKeyBinding(record)),
        },
        facts: certificateFacts(leaf),
      };
    });
  }

  /** A challenge did not become valid: the CA's own words, from the authorization. */
  async #challengeFailure(
    context: CallContext,
    client: acme.Client,
    order: acme.Order,
    domain: string,
    type: string,
    error: Error,
  ): Promise<AcmeFailure> {
    let authorizations: Awaited<ReturnType<typeof client.getAuthorizations>>;
    try {
      authorizations = await this.#call(context, 'reading the authorizations', () => client.getAuthorizations(order));
    } catch (readError) {
      return readError as AcmeFailure;
    }
    const authorization = authorizations.find((candidate) => normalizeDomain(candidate.identifier.value) === domain);
    const challenge = authorization?.challenges.find((candidate) => candidate.type === type);
    if (challenge?.status === 'invalid' || authorization?.status === 'invalid') {
      const problem = (challenge as { error?: { type?: string; detail?: string } } | undefined)?.error;
      const reason = problem ? `${problem.type ? `${problem.type}: ` : ''}${problem.detail ?? ''}` : error.message;
      return new AcmeFailure('final', `${type} validation of ${domain} failed: ${reason}`);
    }
    return new AcmeFailure('transient', `${type} validation of ${domain} did not finish: ${error.message}`);
  }
}
