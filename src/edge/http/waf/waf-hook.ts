/**
 * The bridge between the HTTP proxy's WAF phases (src/edge/http/phases/waf-request.ts) and a WAF engine
 * (ModSecurity now, our compiled engine later): it turns the proxy's request into the engine's,
 * the engine's verdict into block / continue, and matched rules into the WAF_EVENT of the spec.
 *
 * - A request the engine would interrupt is BLOCKED (403 page) in BLOCKING mode and LOGGED (let
 *   through) in LOGGING mode; both produce one WAF_EVENT with every matched rule. Requests that only
 *   matched rules below the anomaly threshold produce no event (nothing was, or would have been,
 *   blocked), but go to the audit log.
 * - Matched data may hold passwords or tokens: it leaves the engine only with `waf.logMatchedData`.
 * - Response side: the engine's transaction is kept from the request to the response (an exchange),
 *   so response rules see the request too. A response that the engine would interrupt is replaced
 *   by the block page before any byte reaches the client. An exchange lives as long as its request:
 *   the response side ends it, and so does the end of a request that never got that far
 *   (`endExchange`: client gone, origin failed, our own page, upgrade). The TTL only catches what
 *   those would miss; `exchangeCounts` says how each one ended. A response whose exchange is gone
 *   (ended by the TTL, or lost with its thread) cannot be inspected: the hook rejects, and the
 *   proxy applies its `waf.failMode` as for a request.
 * - Each request names its proxy's tenant (`WafRequest.tenant`): the engine's threads are shared
 *   fairly between tenants as well as between clients.
 * - Body limits are the proxy's (phases/waf-request.ts): the options here are the defaults of proxies
 *   that do not set `waf.requestBodyLimit` / `waf.bodyLimitAction`.
 */
import type { WafEngine, WafExchange, WafMatchedRule, WafRequest, WafEngineSettings, WafEngineVerdict } from '@tps/waf';
import { WafUnavailableError } from '@tps/waf';
import type { WafHook, WafRequestHead, WafRequestInput, WafResponseInput, WafVerdict } from './types.ts';
import type { MatchedRule } from '@tps/model';
import type { WafAuditLog } from './audit-log.ts';

/** `performance`, read once (the global is an accessor: a getter call on each read). */
const clock: typeof performance = performance;

export interface WafHookOptions {
  /** Request body bytes inspected, for proxies that do not set `waf.requestBodyLimit`. Default 128 KiB. */
  requestBodyLimit?: number;
  /** A multipart/form-data body may be this long and is inspected whole. Default 1 MiB. */
  multipartBodyLimit?: number;
  /** Text-like response body bytes inspected; 0 = response headers only. Default 64 KiB. */
  responseBodyLimit?: number;
  /** One JSON line per request with any matched rule. */
  auditLog?: WafAuditLog;
  /** How long a request's engine transaction waits for its response before it is ended (and up to a quarter of it, at most a second, more). Default 120 s. */
  exchangeTtlMs?: number;
  /**
   * A request body longer than the limit, for proxies that do not set `waf.bodyLimitAction`: REJECT
   * (default) refuses it with 413 before the origin sees it; PROCESS_PARTIAL inspects its first part
   * and lets the rest stream on uninspected, as ModSecurity's ProcessPartial.
   */
  bodyLimitAction?: 'PROCESS_PARTIAL' | 'REJECT';
  /** Every rule that matched a request or a response (each once per verdict), for per-rule counters. */
  onRulesMatched?: (rules: readonly WafMatchedRule[]) => void;
}

/** How the hook's exchanges ended, since it was made: a leak shows as `expired` (the TTL), or as `opened` running ahead of the rest. */
export interface WafExchangeCounts {
  opened: number;
  /** Ended by the response side. */
  inspected: number;
  /** Ended with the request, without a response inspection. */
  abandoned: number;
  /** Ended by the TTL. */
  expired: number;
}

export interface WafEngineHook extends WafHook {
  inspectResponse(input: WafResponseInput): Promise<WafVerdict>;
  endExchange(supportId: string): void;
  /** Exchanges open now. */
  readonly openExchanges: number;
  readonly exchangeCounts: Readonly<WafExchangeCounts>;
}

interface OpenExchange {
  exchange: WafExchange;
  request: WafRequest;
  requestVerdict: WafEngineVerdict;
  /** performance.now() past which the TTL ends it. */
  expiresAt: number;
}

export function createWafHook(engine: WafEngine, options: WafHookOptions = {}): WafEngineHook {
  const exchanges = new Map<string, OpenExchange>();
  const ttlMs = options.exchangeTtlMs ?? 120_000;
  const auditLog = options.auditLog;
  const responseBodyLimit = options.responseBodyLimit ?? 64 * 1024;
  const requestBodyLimit = options.requestBodyLimit ?? 128 * 1024;
  const counts: WafExchangeCounts = { opened: 0, inspected: 0, abandoned: 0, expired: 0 };
  const onRulesMatched = options.onRulesMatched;

  const end = (supportId: string, how: 'inspected' | 'abandoned' | 'expired') => {
    const open = exchanges.get(supportId);
    if (!open) return;
    exchanges.delete(supportId);
    counts[how]++;
    open.exchange.end();
  };
  // The exchanges are held in the order they opened, all with the same TTL: one sweep (while any
  // is open, every quarter of the TTL, at most a second) ends the expired ones from the front,
  // instead of a timer per exchange.
  const sweepEveryMs = Math.max(1, Math.min(1000, Math.ceil(ttlMs / 4)));
  let sweeper: NodeJS.Timeout | undefined;
  const sweep = (): void => {
    const now = clock.now();
    for (const [supportId, open] of exchanges) {
      if (open.expiresAt > now) break;
      end(supportId, 'expired');
    }
    if (exchanges.size === 0) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  };

  const audit = (
    head: WafRequestHead,
    request: WafRequest,
    requestVerdict: WafEngineVerdict,
    responseVerdict?: WafEngineVerdict,
    responseStatus?: number,
  ) => {
    auditLog?.record({
      supportId: head.supportId,
      tenantId: head.tenantId,
      trafficConfigId: head.proxyId,
      engine: engine.name,
      mode: head.settings.mode,
      paranoiaLevel: head.settings.paranoiaLevel,
      ...(head.settings.anomalyThreshold !== undefined && { anomalyThreshold: head.settings.anomalyThreshold }),
      logMatchedData: head.settings.logMatchedData,
      request,
      requestVerdict,
      ...(responseVerdict && { responseVerdict }),
      ...(responseStatus !== undefined && { responseStatus }),
    });
  };

  return {
    requestBodyLimit,
    multipartBodyLimit: Math.max(requestBodyLimit, options.multipartBodyLimit ?? 1024 * 1024),
    bodyLimitAction: options.bodyLimitAction ?? 'REJECT',
    responseBodyLimit,
    get openExchanges() {
      return exchanges.size;
    },
    exchangeCounts: counts,

    endExchange(supportId: string): void {
      end(supportId, 'abandoned');
    },

    // (not async: the engine's promise is followed by one `then`, without an async function's
    // own promise and resumption around it on the event loop)
    inspectRequest(input: WafRequestInput): Promise<WafVerdict> {
      try {
        const request = toEngineRequest(input, input.body);
        const settings = engineSettings(input.settings);
        if (!engine.beginExchange)
          return engine.inspectRequest(request, settings).then((verdict) => requestVerdict(input, request, verdict));
        return engine.beginExchange(request, settings).then((exchange) => {
          const verdict = exchange.requestVerdict;
          if (verdict.interrupt && input.settings.mode === 'BLOCKING') {
            exchange.end();
          } else {
            counts.opened++;
            exchanges.set(input.supportId, { exchange, request, requestVerdict: verdict, expiresAt: clock.now() + ttlMs });
            if (sweeper === undefined) {
              sweeper = setInterval(sweep, sweepEveryMs);
              sweeper.unref();
            }
          }
          return requestVerdict(input, request, verdict);
        });
      } catch (error) {
        return Promise.reject(error);
      }
    },

    inspectResponse(input: WafResponseInput): Promise<WafVerdict> {
      const supportId = input.request.supportId;
      const open = exchanges.get(supportId);
      if (!open) {
        // An engine without exchanges inspects no response; with them, this one's is gone.
        if (!engine.beginExchange) return Promise.resolve({ action: 'continue' });
        return Promise.reject(new WafUnavailableError('the WAF transaction of this request ended before its response'));
      }
      let inspected: Promise<WafEngineVerdict>;
      try {
        const headers = input.headers;
        const { statusCode: status, body } = input;
        const httpVersion = open.request.httpVersion;
        inspected = open.exchange.inspectResponse(body ? { status, httpVersion, headers, body } : { status, httpVersion, headers });
      } catch (error) {
        end(supportId, 'inspected');
        return Promise.reject(error);
      }
      return inspected.then(
        (verdict) => {
          end(supportId, 'inspected');
          return responseVerdict(input, open, verdict);
        },
        (error: unknown) => {
          end(supportId, 'inspected');
          throw error;
        },
      );
    },
  };

  /** What the proxy gets of a request's verdict; its matched rules counted, and audited unless its response is still to come. */
  function requestVerdict(input: WafRequestInput, request: WafRequest, verdict: WafEngineVerdict): WafVerdict {
    if (verdict.matchedRules.length > 0) {
      onRulesMatched?.(verdict.matchedRules);
      if (!engine.beginExchange || verdict.interrupt) audit(input, request, verdict);
    }
    return toProxyVerdict(verdict, input.settings);
  }

  /** What the proxy gets of a response's verdict: the exchange audited when either side matched, its new rules counted. */
  function responseVerdict(input: WafResponseInput, open: OpenExchange, verdict: WafEngineVerdict): WafVerdict {
    if (open.requestVerdict.matchedRules.length > 0 || verdict.matchedRules.length > 0) {
      audit(
        input.request,
        open.request,
        open.requestVerdict,
        verdict,
        verdict.interrupt && input.request.settings.mode === 'BLOCKING' ? 403 : input.statusCode,
      );
    }
    // Rules already reported with the request are not reported twice.
    const fresh = withoutRulesOf(verdict, open.requestVerdict);
    if (fresh.matchedRules.length > 0) onRulesMatched?.(fresh.matchedRules);
    return toProxyVerdict(fresh, input.request.settings);
  }
}

/** `verdict` without the rules `earlier` reported (the same object when there are none). */
function withoutRulesOf(verdict: WafEngineVerdict, earlier: WafEngineVerdict): WafEngineVerdict {
  if (verdict.matchedRules.length === 0 || earlier.matchedRules.length === 0) return verdict;
  const seen = new Set(earlier.matchedRules.map((rule) => rule.id));
  return { ...verdict, matchedRules: verdict.matchedRules.filter((rule) => !seen.has(rule.id)) };
}

function toEngineRequest(head: WafRequestHead, body: Buffer | null): WafRequest {
  return {
    clientIp: head.client.ip,
    clientPort: head.client.port,
    serverIp: head.server.ip,
    serverPort: head.server.port,
    method: head.method,
    uri: head.url,
    path: head.path,
    httpVersion: head.httpVersion === '2.0' ? '2.0' : head.httpVersion,
    // (flat, as received: the engine reads both forms, and a pool sends this list as it is)
    headers: head.headers,
    ...(body && { body }),
    id: head.supportId,
    tenant: head.tenantId,
  };
}

/**
 * The engine's settings of a proxy's WAF settings: made once per settings object (a proxy's, as of
 * its snapshot), so that each request hands the engine the same object (the engine checks a
 * settings object once, and its threads get it once).
 */
const engineSettingsOf = new WeakMap<WafRequestHead['settings'], WafEngineSettings>();

function engineSettings(settings: WafRequestHead['settings']): WafEngineSettings {
  let engine = engineSettingsOf.get(settings);
  if (engine === undefined) {
    engine = {
      paranoiaLevel: settings.paranoiaLevel,
      mode: settings.mode,
      ...(settings.anomalyThreshold !== undefined && { anomalyThreshold: settings.anomalyThreshold }),
      ruleExclusions: settings.ruleExclusions,
      ...(settings.inputLimits !== undefined && { inputLimits: settings.inputLimits }),
    };
    engineSettingsOf.set(settings, engine);
  }
  return engine;
}

function toProxyVerdict(verdict: WafEngineVerdict, settings: WafRequestHead['settings']): WafVerdict {
  if (!verdict.interrupt) return { action: 'continue' };
  const rules = verdict.matchedRules.map((rule) => toEventRule(rule, settings.logMatchedData));
  if (settings.mode === 'LOGGING') return { action: 'continue', event: { action: 'LOGGED', rules } };
  return { action: 'block', status: 403, event: { action: 'BLOCKED', rules } };
}

function toEventRule(rule: WafMatchedRule, logMatchedData: boolean): MatchedRule {
  return {
    modSecId: rule.id,
    name: rule.message,
    matchedData: logMatchedData ? { status: 'ENABLED', value: rule.matchedData } : { status: 'DISABLED', value: null },
    matchedVariable: rule.matchedVariable,
  };
}
