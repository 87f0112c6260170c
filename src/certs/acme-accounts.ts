/**
 * The ACME accounts of the tenants, one per tenant and directory URL: the stored one (its key sealed
 * at rest), registered at the CA on the tenant's first order, its contact kept current, and
 * registered again when the CA says the account is dead. Accounts in use stay in memory (one per
 * tenant that ordered; tenants are few and operator-made); one registration at a time per tenant.
 */
import acme from 'acme-client';
import type { Store } from '../store/index.ts';
import { AcmeFailure, callCa, callContext, type CallContext } from './acme-failures.ts';
import { acmeAccountKeyBinding, type SecretBox } from './secret-box.ts';

export interface AccountInUse {
  url: string;
  keyPem: string;
}

export interface AcmeAccountsOptions {
  store: Store;
  secrets: SecretBox;
  directoryUrl: string;
  email: string | undefined;
  logger: { info(object: object, message: string): void; warn(object: object, message: string): void } | undefined;
  /** A fresh context for one attempt's calls (the CA's agent and timeout). */
  context: () => CallContext;
  /** An acme-client for an account (registered or not yet). */
  client: (account: { url?: string; keyPem: string }) => acme.Client;
}

export class AcmeAccounts {
  readonly #o: AcmeAccountsOptions;
  readonly #known = new Map<string, AccountInUse>();
  readonly #loading = new Map<string, Promise<AccountInUse>>();

  constructor(options: AcmeAccountsOptions) {
    this.#o = options;
  }

  /** The tenant's stored account at this directory, registered first if there is none. */
  get(tenantId: string): Promise<AccountInUse> {
    const known = this.#known.get(tenantId);
    if (known) return Promise.resolve(known);
    const loading = this.#loading.get(tenantId);
    if (loading) return loading;
    const load = (async () => {
      try {
        const { store, secrets, directoryUrl, email } = this.#o;
        const contact = email ? [`mailto:${email}`] : [];
        const stored = await store.acmeAccounts.get(directoryUrl, tenantId);
        if (stored) {
          const account = {
            url: stored.accountUrl,
            keyPem: secrets.open(stored.sealedPrivateKey, acmeAccountKeyBinding(directoryUrl, tenantId)),
          };
          let alive = true;
          if ((stored.email ?? null) !== (email ?? null)) {
            const context = this.#o.context();
            try {
              await callContext.run(context, () =>
                callCa(context, 'updating the account contact', () => this.#o.client(account).updateAccount({ contact })),
              );
              await store.acmeAccounts.updateEmail(directoryUrl, tenantId, email ?? null);
            } catch (error) {
              if (!(error instanceof AcmeFailure) || error.kind !== 'account') throw error;
              // Dead already: register a new account below.
              this.#o.logger?.warn(
                { tenantId, accountUrl: account.url, detail: error.message },
                'acme: the CA refused the account; registering a new one',
              );
              await store.acmeAccounts.forget(directoryUrl, tenantId, account.url);
              alive = false;
            }
          }
          if (alive) {
            this.#known.set(tenantId, account);
            return account;
          }
        }
        const keyPem = (await acme.crypto.createPrivateEcdsaKey('P-256')).toString();
        const client = this.#o.client({ keyPem });
        const context = this.#o.context();
        await callContext.run(context, () =>
          callCa(context, 'registering the ACME account', () => client.createAccount({ termsOfServiceAgreed: true, contact })),
        );
        const kept = await store.acmeAccounts.add({
          directoryUrl,
          tenantId,
          email: email ?? null,
          accountUrl: client.getAccountUrl(),
          sealedPrivateKey: secrets.seal(keyPem, acmeAccountKeyBinding(directoryUrl, tenantId)),
        });
        this.#o.logger?.info({ directoryUrl, tenantId, accountUrl: kept.accountUrl }, 'acme: account registered');
        const account = {
          url: kept.accountUrl,
          keyPem: secrets.open(kept.sealedPrivateKey, acmeAccountKeyBinding(directoryUrl, tenantId)),
        };
        this.#known.set(tenantId, account);
        return account;
      } finally {
        this.#loading.delete(tenantId);
      }
    })();
    this.#loading.set(tenantId, load);
    return load;
  }

  /** The CA said the account is dead: forgotten (store and memory), so that the next get registers a new one. */
  async forget(tenantId: string, account: AccountInUse): Promise<void> {
    await this.#o.store.acmeAccounts.forget(this.#o.directoryUrl, tenantId, account.url);
    if (this.#known.get(tenantId)?.url === account.url) this.#known.delete(tenantId);
  }
}
