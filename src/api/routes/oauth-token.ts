import { Type } from '@sinclair/typebox';
import type { RoutePlugin } from '../types.ts';
import { documentOnly } from '../schemas/validator.ts';
import { RATE_LIMITED_BEFORE_BODY } from '../rate-limit-before-body.ts';

const TokenRequest = Type.Object(
  {
    client_id: Type.String({ description: 'From the service account created in the portal or with `tps service-account create`.' }),
    client_secret: Type.String({ description: 'Shown once, when the service account was created.' }),
    grant_type: Type.String({ enum: ['client_credentials'] }),
    audience: Type.String({ description: "The service's base address ({base_url})." }),
  },
  { description: 'Every field is checked by the handler, so that errors follow RFC 6749.' },
);

const TokenResponse = Type.Object({
  access_token: Type.String({ description: 'EdDSA-signed JWT, valid 24 hours.' }),
  token_type: Type.Literal('Bearer'),
  expires_in: Type.Integer({ description: 'Seconds until the token expires.' }),
  scope: Type.String(),
});

const OAuthErrorBody = Type.Object({
  error: Type.String({ enum: ['invalid_request', 'invalid_client', 'unsupported_grant_type'] }),
  error_description: Type.String(),
});

/** The token issuer's routes, under the path of {auth_url}. */
export const tokenRoutes: RoutePlugin = async (app, { deps }) => {
  const prefix = deps.settings.authUrl ? new URL(deps.settings.authUrl).pathname.replace(/\/+$/, '') : '';

  app.post(
    `${prefix}/oauth/token`,
    {
      config: RATE_LIMITED_BEFORE_BODY,
      schema: {
        tags: ['auth'],
        summary: 'Obtain an access token (OAuth 2.0 client credentials)',
        description:
          'A request within 12 hours of the last token issued to the same client answers that same token again ' +
          '(the spec allows one new token per 12 hours); it is never a lockout.',
        body: documentOnly(TokenRequest),
        response: { 200: TokenResponse, 400: OAuthErrorBody, 401: OAuthErrorBody },
      },
    },
    async (request, reply) => {
      // The body is whatever the client sent (documentOnly): the issuer checks every field.
      const body = request.body && typeof request.body === 'object' ? (request.body as Record<string, unknown>) : {};
      const token = await deps.tokens.issue(body);
      void reply.header('Cache-Control', 'no-store').header('Pragma', 'no-cache');
      return token;
    },
  );

  app.get(`${prefix}/.well-known/jwks.json`, { schema: { tags: ['auth'], summary: 'Public keys that verify access tokens' } }, async () =>
    deps.tokens.jwks(),
  );
};
