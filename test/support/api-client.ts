/** A small client of the public API, as a user's script would call it (real HTTP, undici's fetch). */
import http from 'node:http';
import type { Credentials, Tps } from './tps.ts';

export const JSONAPI = 'application/vnd.api+json';

// Answers default to `any` so that tests can assert on nested fields without a type per response;
// each test states the fields it expects.
export interface Answer<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/** JSON:API error objects, as the API answers them. */
export interface ErrorBody {
  errors: {
    status: string;
    code: string;
    title: string;
    detail: string;
    source?: { pointer?: string; parameter?: string; header?: string };
  }[];
}

export async function request<T = any>(
  url: string,
  init: { method?: string; token?: string; body?: unknown; contentType?: string; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<Answer<T>> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.token) headers.authorization = `Bearer ${init.token}`;
  let body: string | undefined = init.rawBody;
  if (init.body !== undefined) body = JSON.stringify(init.body);
  if (body !== undefined) headers['content-type'] = init.contentType ?? JSONAPI;
  const method = init.method ?? 'GET';
  // fetch refuses a body on GET, which the spec's certificate upload uses: send that one with node:http.
  const response =
    method === 'GET' && body !== undefined ? await getWithBody(url, headers, body) : await fetch(url, { method, headers, body });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, headers: response.headers, body: parsed as T };
}

export async function getToken(tps: Tps, credentials: Credentials): Promise<string> {
  const answer = await request<{ access_token: string }>(`${tps.url}/oauth/token`, {
    method: 'POST',
    contentType: 'application/json',
    body: { client_id: credentials.clientId, client_secret: credentials.clientSecret, grant_type: 'client_credentials', audience: tps.url },
  });
  if (answer.status !== 200) throw new Error(`token request failed: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body.access_token;
}

/** The API bound to one tenant's token. */
export class TenantApi {
  readonly tps: Tps;
  readonly token: string;
  readonly tenantId: string;

  constructor(tps: Tps, token: string, tenantId: string) {
    this.tps = tps;
    this.token = token;
    this.tenantId = tenantId;
  }

  static async connect(tps: Tps, credentials: Credentials): Promise<TenantApi> {
    return new TenantApi(tps, await getToken(tps, credentials), credentials.tenantId);
  }

  call<T = any>(method: string, path: string, body?: unknown, init: { contentType?: string; rawBody?: string } = {}) {
    return request<T>(`${this.tps.url}${path}`, { method, token: this.token, body, ...init });
  }

  get<T = any>(path: string) {
    return this.call<T>('GET', path);
  }
}

async function getWithBody(url: string, headers: Record<string, string>, body: string): Promise<Response> {
  return new Promise((resolve, reject) => {
    const outgoing = http.request(
      url,
      { method: 'GET', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } },
      (incoming) => {
        const chunks: Buffer[] = [];
        incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
        incoming.on('end', () => {
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(incoming.headers)) if (typeof value === 'string') responseHeaders.set(name, value);
          resolve(new Response(Buffer.concat(chunks), { status: incoming.statusCode ?? 0, headers: responseHeaders }));
        });
      },
    );
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}
