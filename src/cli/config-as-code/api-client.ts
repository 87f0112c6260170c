/**
 * The public API as `tps apply` and `tps export` call it: a service account's token
 * (client credentials), then JSON:API calls on the tenant the token belongs to.
 */
import type { ApiClientSettings } from '../../config/settings.ts';
import { JSONAPI_MEDIA_TYPE, type JsonApiErrorObject } from '../../api/jsonapi.ts';
import { CliError } from '../output.ts';
import { bindingLabel } from './plan.ts';
import type { CurrentCaCertificate, CurrentCertificate, CurrentState, CurrentTrafficConfig } from './types.ts';

/** An answer of the API that is not a success, with its JSON:API errors. */
export class ApiCallError extends Error {
  readonly status: number;
  readonly errors: JsonApiErrorObject<string>[];
  constructor(status: number, errors: JsonApiErrorObject<string>[], what: string) {
    super(`${what}: ${status} ${errors.map((error) => `${error.code}: ${error.detail}`).join('; ')}`);
    this.status = status;
    this.errors = errors;
  }
}

/** How often a call answered 429 is tried again (after the Retry-After the API sends). */
const RATE_LIMIT_RETRIES = 3;
const MAX_RETRY_WAIT_MS = 60_000;
const CALL_TIMEOUT_MS = 60_000;

export class ApiSession {
  readonly apiUrl: string;
  readonly tenantId: string;
  readonly #token: string;

  private constructor(apiUrl: string, token: string, tenantId: string) {
    this.apiUrl = apiUrl;
    this.#token = token;
    this.tenantId = tenantId;
  }

  static async connect(settings: ApiClientSettings): Promise<ApiSession> {
    const response = await send(`${settings.authUrl}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        client_id: settings.clientId,
        client_secret: settings.clientSecret,
        grant_type: 'client_credentials',
        audience: settings.audience,
      }),
    });
    const body = (await readJson(response)) as { access_token?: string; error?: string; error_description?: string } | undefined;
    if (response.status !== 200 || typeof body?.access_token !== 'string') {
      const reason = body?.error
        ? `${body.error}${body.error_description ? `: ${body.error_description}` : ''}`
        : `HTTP ${response.status}`;
      throw new CliError(
        'TOKEN_REFUSED',
        `the token issuer at ${settings.authUrl} refused the service account ${settings.clientId} (${reason})`,
      );
    }
    const tenantId = tenantOf(body.access_token);
    if (!tenantId) throw new CliError('TOKEN_REFUSED', 'the access token names no tenant');
    return new ApiSession(settings.apiUrl, body.access_token, tenantId);
  }

  /** Calls the API; a non-2xx answer throws ApiCallError. */
  async call<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const response = await send(`${this.apiUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.#token}`,
          accept: JSONAPI_MEDIA_TYPE,
          ...(body !== undefined && { 'content-type': JSONAPI_MEDIA_TYPE }),
        },
        ...(body !== undefined && { body: JSON.stringify(body) }),
      });
      if (response.status === 429 && attempt < RATE_LIMIT_RETRIES) {
        const seconds = Number(response.headers.get('retry-after'));
        await response.body?.cancel();
        await new Promise((resolve) =>
          setTimeout(resolve, Math.min(MAX_RETRY_WAIT_MS, Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 1000)),
        );
        continue;
      }
      const parsed = await readJson(response);
      if (response.status >= 200 && response.status < 300) return parsed as T;
      const errors = (parsed as { errors?: JsonApiErrorObject<string>[] } | undefined)?.errors;
      throw new ApiCallError(
        response.status,
        Array.isArray(errors) && errors.length > 0
          ? errors
          : [
              {
                status: String(response.status),
                code: 'HTTP_ERROR',
                title: 'Error',
                detail: `${method} ${path} answered ${response.status}`,
              },
            ],
        `${method} ${path}`,
      );
    }
  }

  /** Everything apply compares and export writes, for the token's tenant. */
  async currentState(): Promise<CurrentState> {
    const [configs, certificates, caCertificates, ips] = await Promise.all([
      this.call<{ data: CurrentTrafficConfig[] }>('GET', '/api/v2/traffic-mgmt/traffic-configs'),
      this.call<{ data: CurrentCertificate[] }>('GET', '/api/v2/traffic-mgmt/certificates'),
      this.call<{ data: CurrentCaCertificate[] }>('GET', '/api/v2/traffic-mgmt/ca-certificates'),
      this.call<{ data: { attributes: { address: string; assignedPorts?: { port: number; protocol: string }[] } }[] }>(
        'GET',
        `/api/v1/traffic-mgmt/accounts/${this.tenantId}/ips`,
      ),
    ]);
    return {
      tenantId: this.tenantId,
      trafficConfigs: configs.data.map(({ id, type, attributes }) => ({ id, type, attributes })),
      certificates: certificates.data,
      caCertificates: caCertificates.data,
      frontendIps: ips.data.map((ip) => ip.attributes.address),
      assignedBindings: ips.data.flatMap((ip) =>
        (ip.attributes.assignedPorts ?? []).map((taken) => bindingLabel(ip.attributes.address, taken.port, taken.protocol)),
      ),
    };
  }
}

async function send(url: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, { ...init, signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    throw new CliError(
      'API_UNREACHABLE',
      `cannot reach ${new URL(url).origin}: ${cause?.code ?? cause?.message ?? (error as Error).message} (set --api-url or TPS_API_URL)`,
    );
  }
}

async function readJson(response: Response): Promise<unknown> {
  const text = await response.text();
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** The tenant claim of our own access token (read, not verified: the API verifies it at each call). */
function tenantOf(token: string): string | undefined {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { tenant_id?: unknown };
    return typeof payload.tenant_id === 'string' ? payload.tenant_id : undefined;
  } catch {
    return undefined;
  }
}
