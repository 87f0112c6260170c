/**
 * The token issuer (`POST {auth_url}/oauth/token`, OAuth 2.0 client credentials) and the bearer
 * check every API call goes through.
 *
 * Tokens are Ed25519-signed JWTs. Ed25519 signatures are deterministic, which gives the spec's
 * "one new token per 12 hours" for free: within the reuse window the same claims are signed again
 * and the client gets the very same token, so a client that lost its cache is never locked out.
 */
import crypto from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors, type JWK, type JWTPayload } from 'jose';
import type { Store } from '../store/index.ts';
import { signingKeyBinding, type SecretBox } from '../certs/secret-box.ts';
import { SCOPES, type Scope, type ServiceAccount } from '../store/service-accounts.ts';

export interface TokenSettings {
  /** The service's base address: the only accepted audience. */
  audience: string;
  /** The issuer's address ({auth_url}). */
  issuer: string;
  ttlSeconds: number;
  reuseSeconds: number;
}

/** An RFC 6749 section 5.2 error. */
export class OAuthError extends Error {
  readonly status: 400 | 401;
  readonly error: 'invalid_request' | 'invalid_client' | 'unsupported_grant_type';
  constructor(status: 400 | 401, error: OAuthError['error'], description: string) {
    super(description);
    this.status = status;
    this.error = error;
  }
}

/** Why a bearer token was refused (RFC 6750). */
export class BearerError extends Error {
  readonly status: 401 | 403;
  readonly error: 'invalid_token' | 'insufficient_scope' | undefined;
  constructor(status: 401 | 403, error: BearerError['error'], description: string) {
    super(description);
    this.status = status;
    this.error = error;
  }

  get wwwAuthenticate(): string {
    const parts = ['Bearer realm="tps"'];
    if (this.error) parts.push(`error="${this.error}"`, `error_description="${this.message.replace(/"/g, "'")}"`);
    return parts.join(', ');
  }
}

export interface Principal {
  tenantId: string;
  clientId: string;
  scopes: ReadonlySet<Scope>;
}

interface SigningKey {
  kid: string;
  publicJwk: JWK;
  privateKey: crypto.KeyObject;
  publicKey: crypto.KeyObject;
}

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  scope: string;
}

export class TokenIssuer {
  readonly #store: Store;
  readonly #secrets: SecretBox;
  readonly #settings: TokenSettings;
  #keys: SigningKey[] = [];

  constructor(store: Store, secrets: SecretBox, settings: TokenSettings) {
    this.#store = store;
    this.#secrets = secrets;
    this.#settings = settings;
  }

  /** Loads the signing keys, creating the first one on the very first start. */
  async init(): Promise<void> {
    if ((await this.#store.signingKeys.list()).length === 0) {
      const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519');
      const publicJwk = publicKey.export({ format: 'jwk' });
      const kid = crypto.createHash('sha256').update(JSON.stringify(publicJwk)).digest('base64url').slice(0, 16);
      await this.#store.signingKeys.insertFirst({
        kid,
        publicJwk: JSON.stringify({ ...publicJwk, kid, alg: 'EdDSA', use: 'sig' }),
        sealedPrivateKey: this.#secrets.seal(privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(), signingKeyBinding(kid)),
        createdAt: new Date().toISOString(),
      });
    }
    this.#keys = (await this.#store.signingKeys.list()).map((record) => {
      const privateKey = crypto.createPrivateKey(this.#secrets.open(record.sealedPrivateKey, signingKeyBinding(record.kid)));
      return {
        kid: record.kid,
        publicJwk: JSON.parse(record.publicJwk) as JWK,
        privateKey,
        publicKey: crypto.createPublicKey(privateKey),
      };
    });
  }

  /** The public keys, as served at `{auth_url}/.well-known/jwks.json`. */
  jwks(): { keys: JWK[] } {
    return { keys: this.#keys.map((key) => key.publicJwk) };
  }

  /** Handles a token request body (JSON or form fields); throws OAuthError. */
  async issue(body: Record<string, unknown>): Promise<TokenResponse> {
    const field = (name: string): string => {
      const value = body[name];
      if (typeof value !== 'string' || value === '') throw new OAuthError(400, 'invalid_request', `${name} is required`);
      return value;
    };
    const grantType = field('grant_type');
    if (grantType !== 'client_credentials') {
      throw new OAuthError(400, 'unsupported_grant_type', 'only grant_type client_credentials is supported');
    }
    const clientId = field('client_id');
    const clientSecret = field('client_secret');
    const audience = field('audience').replace(/\/+$/, '');
    if (audience !== this.#settings.audience) {
      throw new OAuthError(400, 'invalid_request', `audience must be the service's base address, ${this.#settings.audience}`);
    }
    const authenticated = await this.#store.serviceAccounts.authenticate(clientId, clientSecret);
    if (!authenticated) throw new OAuthError(401, 'invalid_client', 'unknown client, wrong secret or revoked service account');
    const { account, lastToken } = authenticated;

    const now = Math.floor(Date.now() / 1000);
    const scope = account.scopes.join(' ');
    const key = this.#keys[0]!;
    const reusable =
      lastToken !== null &&
      lastToken.scopes === scope &&
      now < lastToken.iat + this.#settings.reuseSeconds &&
      now < lastToken.exp &&
      this.#keys.some((candidate) => candidate.kid === lastToken.kid);
    const claims = reusable
      ? lastToken
      : { iat: now, exp: now + this.#settings.ttlSeconds, jti: crypto.randomUUID(), kid: key.kid, scopes: scope };
    if (!reusable) await this.#store.serviceAccounts.recordToken(clientId, claims);
    const signingKey = this.#keys.find((candidate) => candidate.kid === claims.kid) ?? key;
    const token = await this.#sign(account, claims, signingKey);
    return { access_token: token, token_type: 'Bearer', expires_in: Math.max(0, claims.exp - now), scope };
  }

  #sign(account: ServiceAccount, claims: { iat: number; exp: number; jti: string; scopes: string }, key: SigningKey): Promise<string> {
    return new SignJWT({ tenant_id: account.tenantId, client_id: account.clientId, scope: claims.scopes })
      .setProtectedHeader({ alg: 'EdDSA', typ: 'at+jwt', kid: key.kid })
      .setIssuer(this.#settings.issuer)
      .setSubject(account.clientId)
      .setAudience(this.#settings.audience)
      .setIssuedAt(claims.iat)
      .setExpirationTime(claims.exp)
      .setJti(claims.jti)
      .sign(key.privateKey);
  }

  /** Checks an `Authorization` header value; throws BearerError (401). */
  async authenticate(authorization: string | undefined): Promise<Principal> {
    const match = /^Bearer +([A-Za-z0-9._~+/-]+=*) *$/i.exec(authorization ?? '');
    if (!match) throw new BearerError(401, undefined, 'an access token is required (Authorization: Bearer <token>)');
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(
        match[1]!,
        async (header) => {
          const key = this.#keys.find((candidate) => candidate.kid === header.kid);
          if (!key) throw new joseErrors.JWKSNoMatchingKey();
          return key.publicKey;
        },
        {
          algorithms: ['EdDSA'],
          audience: this.#settings.audience,
          issuer: this.#settings.issuer,
          requiredClaims: ['exp', 'iat', 'sub'],
        },
      ));
    } catch (error) {
      throw new BearerError(401, 'invalid_token', describeJoseError(error));
    }
    const clientId = String(payload.client_id ?? payload.sub);
    const account = await this.#store.serviceAccounts.getByClientId(clientId);
    if (!account || account.revokedAt !== null || account.tenantId !== payload.tenant_id) {
      throw new BearerError(401, 'invalid_token', 'the service account of this token was revoked');
    }
    const granted = String(payload.scope ?? '').split(' ');
    return {
      tenantId: account.tenantId,
      clientId,
      scopes: new Set(SCOPES.filter((scope) => granted.includes(scope) && account.scopes.includes(scope))),
    };
  }
}

function describeJoseError(error: unknown): string {
  if (error instanceof joseErrors.JWTExpired) return 'the access token has expired';
  if (error instanceof joseErrors.JWTClaimValidationFailed) return `the access token's ${error.claim} claim is not accepted`;
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return 'the access token is not signed with EdDSA';
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'the access token signature is invalid';
  if (error instanceof joseErrors.JWKSNoMatchingKey) return 'the access token was signed by an unknown key';
  return 'the access token is malformed';
}
