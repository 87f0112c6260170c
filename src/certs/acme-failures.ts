/**
 * How the ACME service tells failures apart: what the CA (or the network) answered an attempt,
 * read from acme-client's HTTP layer, made into an AcmeFailure that says whether ordering again can
 * help (final, transient with the CA's Retry-After, or a dead account). acme.ts decides what to do
 * with each (backoff, FAILED, a new account).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type https from 'node:https';
import { createRequire } from 'node:module';
import acme from 'acme-client';

/** Why an attempt failed, as the CA (or the network) said. */
export class AcmeFailure extends Error {
  /** final: ordering again will not help; transient: retry later; account: the account is dead. */
  readonly kind: 'final' | 'transient' | 'account';
  readonly retryAfterMs: number | undefined;
  constructor(kind: 'final' | 'transient' | 'account', detail: string, retryAfterMs?: number) {
    super(detail);
    this.kind = kind;
    this.retryAfterMs = retryAfterMs;
  }
}

// ---------------------------------------------------------------------------------------------
// acme-client's HTTP layer. Its axios instance retries 429 and 5xx in-process, sleeping as long as
// Retry-After says (hours, for a rate limit), and its errors keep only the problem's detail. So:
// no in-process retries (our backoff, with the record showing why, does that), and an adapter
// that notes each response's problem document in the context of the attempt that sent it.

/** What the last response of an attempt said: its status and problem document, or the network error. */
export interface ProblemNote {
  status?: number;
  type?: string;
  detail?: string;
  retryAfterMs?: number;
  network?: string;
}

export interface CallContext {
  agent: https.Agent | undefined;
  timeoutMs: number;
  last: ProblemNote | undefined;
}

export const callContext = new AsyncLocalStorage<CallContext>();

interface AxiosLikeConfig {
  httpsAgent?: unknown;
  timeout?: number;
}
interface AxiosLikeResponse {
  status: number;
  headers: Record<string, string | undefined>;
  data: unknown;
}
type Adapter = (config: AxiosLikeConfig) => Promise<AxiosLikeResponse>;

function retryAfterMs(header: string | undefined): number | undefined {
  if (!header) return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function noteResponse(context: CallContext | undefined, response: AxiosLikeResponse): void {
  if (!context) return;
  // The adapter's response is not parsed yet (axios transforms it afterwards): JSON text, usually.
  let data = response.data;
  if (typeof data === 'string' || Buffer.isBuffer(data)) {
    try {
      data = JSON.parse(data.toString());
    } catch {
      data = undefined;
    }
  }
  const body = (typeof data === 'object' && data !== null ? data : {}) as { type?: unknown; detail?: unknown };
  context.last =
    response.status >= 400
      ? {
          status: response.status,
          ...(typeof body.type === 'string' && { type: body.type }),
          ...(typeof body.detail === 'string' && { detail: body.detail }),
          ...(retryAfterMs(response.headers['retry-after']) !== undefined && {
            retryAfterMs: retryAfterMs(response.headers['retry-after'])!,
          }),
        }
      : { status: response.status };
}

let adapterInstalled = false;
export function installAdapter(): void {
  if (adapterInstalled) return;
  adapterInstalled = true;
  // The axios module acme-client itself loaded, for its HTTP adapter.
  const axiosOfAcme = createRequire(createRequire(import.meta.url).resolve('acme-client'))('axios') as {
    getAdapter(name: string): Adapter;
  };
  const httpAdapter = axiosOfAcme.getAdapter('http');
  const instance = acme.axios as unknown as { defaults: { adapter: unknown; acmeSettings: { retryMaxAttempts: number } } };
  instance.defaults.acmeSettings.retryMaxAttempts = 0;
  instance.defaults.adapter = async (config: AxiosLikeConfig) => {
    const context = callContext.getStore();
    if (context?.agent) config.httpsAgent = context.agent;
    if (!config.timeout) config.timeout = context?.timeoutMs ?? 30_000;
    try {
      const response = await httpAdapter(config);
      noteResponse(context, response);
      return response;
    } catch (error) {
      const response = (error as { response?: AxiosLikeResponse }).response;
      if (response) noteResponse(context, response);
      else if (context) context.last = { network: (error as Error).message || String((error as { code?: string }).code ?? error) };
      throw error;
    }
  };
}

const PROBLEM = 'urn:ietf:params:acme:error:';

/** Turns what acme-client threw into an AcmeFailure, from the last response of the attempt. */
export function classify(error: unknown, context: CallContext, step: string): AcmeFailure {
  if (error instanceof AcmeFailure) return error;
  const last = context.last;
  const message = (error as Error)?.message ?? String(error);
  if (last?.network !== undefined) return new AcmeFailure('transient', `cannot reach the ACME CA (${step}): ${last.network}`);
  if (last?.status !== undefined && last.status >= 400) {
    const type = last.type ?? '';
    const detail = `${step}: the CA answered ${last.status}${type ? ` ${type}` : ''}: ${last.detail ?? message}`;
    if (type === `${PROBLEM}rateLimited` || last.status === 429) return new AcmeFailure('transient', detail, last.retryAfterMs);
    if (
      type === `${PROBLEM}accountDoesNotExist` ||
      (type === `${PROBLEM}unauthorized` && /deactivated|revoked|does not exist/i.test(last.detail ?? ''))
    ) {
      return new AcmeFailure('account', detail);
    }
    if (last.status >= 500 || type === `${PROBLEM}serverInternal` || type === `${PROBLEM}badNonce`) {
      return new AcmeFailure('transient', detail, last.retryAfterMs);
    }
    return new AcmeFailure('final', detail);
  }
  // No error response: acme-client gave up polling, or something unexpected happened locally.
  return new AcmeFailure('transient', `${step}: ${message}`);
}

/** Runs one acme-client call in `context`; its failure becomes an AcmeFailure naming `step`. */
export async function callCa<T>(context: CallContext, step: string, call: () => Promise<T>): Promise<T> {
  context.last = undefined;
  try {
    return await call();
  } catch (error) {
    throw classify(error, context, step);
  }
}
