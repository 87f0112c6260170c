/**
 * The token issuer and the bearer check, as clients meet them: RFC 6749 errors at the token
 * endpoint, RFC 6750 errors on API calls, one token per 12 hours, scopes, revocation.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { startTps, createTenant, type Tps, type Credentials } from '../support/tps.ts';
import { request, getToken } from '../support/api-client.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';

describe('access tokens', () => {
  let tps: Tps;
  let credentials: Credentials;

  before(async () => {
    tps = await startTps();
    credentials = await createTenant(tps);
  });
  after(() => tps.stop());

  const tokenRequest = (overrides: Record<string, string | undefined> = {}) => {
    const body: Record<string, string | undefined> = {
      client_id: credentials.clientId,
      client_secret: credentials.clientSecret,
      grant_type: 'client_credentials',
      audience: tps.url,
      ...overrides,
    };
    return request(`${tps.url}/oauth/token`, { method: 'POST', contentType: 'application/json', body });
  };

  it('issues an EdDSA JWT for the base URL, valid 24 hours, verifiable with the JWKS', async () => {
    const answer = await tokenRequest();
    assert.equal(answer.status, 200);
    assert.equal(answer.body.token_type, 'Bearer');
    assert.equal(answer.headers.get('cache-control'), 'no-store');
    assert.ok(answer.body.expires_in > 24 * 3600 - 60 && answer.body.expires_in <= 24 * 3600);
    const jwks = createRemoteJWKSet(new URL(`${tps.url}/.well-known/jwks.json`));
    const { payload, protectedHeader } = await jwtVerify(answer.body.access_token, jwks, { audience: tps.url, issuer: tps.url });
    assert.equal(protectedHeader.alg, 'EdDSA');
    assert.equal(payload.tenant_id, credentials.tenantId);
    assert.equal(payload.client_id, credentials.clientId);
    assert.equal(payload.scope, 'read write insight');
    assert.equal(payload.exp! - payload.iat!, 24 * 3600);
  });

  it('answers the same token again within 12 hours instead of a new one', async () => {
    const first = await tokenRequest();
    const second = await tokenRequest();
    assert.equal(second.status, 200);
    assert.equal(second.body.access_token, first.body.access_token);
  });

  it('accepts the form encoding of RFC 6749 too', async () => {
    const form = new URLSearchParams({
      client_id: credentials.clientId,
      client_secret: credentials.clientSecret,
      grant_type: 'client_credentials',
      audience: tps.url,
    });
    const answer = await request(`${tps.url}/oauth/token`, {
      method: 'POST',
      contentType: 'application/x-www-form-urlencoded',
      rawBody: form.toString(),
    });
    assert.equal(answer.status, 200);
  });

  it('refuses a wrong secret or an unknown client with 401 invalid_client', async () => {
    for (const overrides of [{ client_secret: `${credentials.clientSecret}x` }, { client_id: '00000000-0000-4000-8000-000000000000' }]) {
      const answer = await tokenRequest(overrides);
      assert.equal(answer.status, 401);
      assert.equal(answer.body.error, 'invalid_client');
      assert.equal(answer.body.access_token, undefined);
    }
  });

  it('refuses another audience with 400 invalid_request', async () => {
    const answer = await tokenRequest({ audience: 'https://api.somewhere-else.example' });
    assert.equal(answer.status, 400);
    assert.equal(answer.body.error, 'invalid_request');
    assert.match(answer.body.error_description, /audience/);
  });

  it('refuses another grant with 400 unsupported_grant_type', async () => {
    const answer = await tokenRequest({ grant_type: 'password' });
    assert.equal(answer.status, 400);
    assert.equal(answer.body.error, 'unsupported_grant_type');
  });

  it('refuses a request missing a field with 400 invalid_request naming it', async () => {
    for (const field of ['client_id', 'client_secret', 'grant_type', 'audience']) {
      const answer = await tokenRequest({ [field]: undefined });
      assert.equal(answer.status, 400, field);
      assert.equal(answer.body.error, 'invalid_request');
      assert.match(answer.body.error_description, new RegExp(field));
    }
    const malformed = await request(`${tps.url}/oauth/token`, {
      method: 'POST',
      contentType: 'application/json',
      rawBody: '{"client_id":',
    });
    assert.equal(malformed.status, 400);
  });

  it('asks for a token on API calls without one (401 with WWW-Authenticate)', async () => {
    const answer = await request(`${tps.url}${CONFIGS}`);
    assert.equal(answer.status, 401);
    assert.equal(answer.headers.get('www-authenticate'), 'Bearer realm="tps"');
    assert.equal(answer.body.errors[0].code, 'UNAUTHORIZED');
  });

  it('refuses a token whose signature was tampered with', async () => {
    const token = await getToken(tps, credentials);
    const [header, payload, signature] = token.split('.') as [string, string, string];
    const flipped = `${signature.slice(0, 10)}${signature[10] === 'A' ? 'B' : 'A'}${signature.slice(11)}`;
    const forgedPayload = Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), scope: 'read write insight admin' }),
    ).toString('base64url');
    for (const forged of [`${header}.${payload}.${flipped}`, `${header}.${forgedPayload}.${signature}`]) {
      const answer = await request(`${tps.url}${CONFIGS}`, { token: forged });
      assert.equal(answer.status, 401);
      assert.match(answer.headers.get('www-authenticate')!, /error="invalid_token"/);
    }
  });

  it('refuses an unsigned token (alg: none)', async () => {
    const token = await getToken(tps, credentials);
    const payload = token.split('.')[1]!;
    const none = `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${payload}.`;
    const answer = await request(`${tps.url}${CONFIGS}`, { token: none });
    assert.equal(answer.status, 401);
    assert.match(answer.headers.get('www-authenticate')!, /invalid_token/);
  });

  it('answers 403 insufficient_scope when the service account lacks the scope', async () => {
    const readOnly = await tps.cli<{ clientId: string; clientSecret: string }>(
      'service-account',
      'create',
      '--tenant',
      credentials.tenantId,
      '--scopes',
      'read',
    );
    const token = await getToken(tps, { ...credentials, ...readOnly });
    assert.equal((await request(`${tps.url}${CONFIGS}`, { token })).status, 200);
    const write = await request(`${tps.url}${CONFIGS}`, { method: 'POST', token, body: { data: {} } });
    assert.equal(write.status, 403);
    assert.equal(write.body.errors[0].code, 'INSUFFICIENT_SCOPE');
    assert.match(write.headers.get('www-authenticate')!, /error="insufficient_scope"/);
    const insight = await request(`${tps.url}/api/v2/insight/http-security-events?filter[tenantId]=${credentials.tenantId}`, { token });
    assert.equal(insight.status, 403);
  });

  it('stops accepting a revoked account and every token it had', async () => {
    const own = await createTenant(tps);
    const token = await getToken(tps, own);
    assert.equal((await request(`${tps.url}${CONFIGS}`, { token })).status, 200);
    const revoked = await tps.cli<{ revokedAt: string }>('service-account', 'revoke', '--client-id', own.clientId);
    assert.ok(revoked.revokedAt);
    const call = await request(`${tps.url}${CONFIGS}`, { token });
    assert.equal(call.status, 401);
    assert.match(call.body.errors[0].detail, /revoked/);
    const again = await request(`${tps.url}/oauth/token`, {
      method: 'POST',
      contentType: 'application/json',
      body: { client_id: own.clientId, client_secret: own.clientSecret, grant_type: 'client_credentials', audience: tps.url },
    });
    assert.equal(again.status, 401);
    assert.equal(again.body.error, 'invalid_client');
  });

  it('never writes a secret or a token into its log', async () => {
    const token = await getToken(tps, credentials);
    await request(`${tps.url}${CONFIGS}`, { token });
    const log = tps.output();
    assert.ok(log.length > 0);
    assert.ok(!log.includes(credentials.clientSecret), 'client secret not logged');
    assert.ok(!log.includes(token), 'token not logged');
    assert.ok(!log.includes(token.split('.')[2]!), 'token signature not logged');
  });
});

describe('an expired access token', () => {
  let tps: Tps;
  after(() => tps?.stop());

  it('is refused with 401 invalid_token once its lifetime has passed', async () => {
    tps = await startTps({ env: { TPS_TOKEN_TTL_SECONDS: '1', TPS_TOKEN_REUSE_SECONDS: '0' } });
    const credentials = await createTenant(tps);
    const token = await getToken(tps, credentials);
    assert.equal((await request(`${tps.url}${CONFIGS}`, { token })).status, 200);
    // jose allows no clock tolerance here: two seconds after issue, a one-second token is expired.
    await new Promise((resolve) => setTimeout(resolve, 2100));
    const answer = await request(`${tps.url}${CONFIGS}`, { token });
    assert.equal(answer.status, 401);
    assert.match(answer.headers.get('www-authenticate')!, /error="invalid_token", error_description="the access token has expired"/);
    const fresh = await getToken(tps, credentials);
    assert.notEqual(fresh, token, 'an expired token is never answered again');
  });
});
