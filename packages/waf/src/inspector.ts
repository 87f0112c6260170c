/**
 * Synchronous request/response inspection with the compiled rule set: the same per-proxy settings
 * semantics as @tps/waf-modsecurity's ModSecurityInspector:
 * - paranoia level and anomaly threshold are set as tx.paranoia_level and
 *   tx.inbound_anomaly_score_threshold before the first phase (the CRS keeps them);
 * - exclusions become the transaction's ctl:ruleRemoveById / ctl:ruleRemoveTargetById lists;
 * - BLOCKING stops after the phase that interrupted; LOGGING reads (and clears) the interruption
 *   after each phase and goes on, as the ModSecurity engine does.
 */
import type { WafInterrupt, WafMatchedRule, WafRequest, WafResponse, WafEngineSettings, WafEngineVerdict } from './engine.ts';
import { removalsFor } from './exclusions.ts';
import { ruleSetSources, resolvedLimits } from './rule-set.ts';
import type { RuleSetOptions } from './rule-set.ts';
import { checkSettings } from './settings.ts';
import { compileRuleSet } from './seclang/compiler.ts';
import type { CompileSource } from './seclang/compiler.ts';
import type { CompiledRuleSet } from './seclang/program.ts';
import {
  addRequestHeader,
  appendRequestBody,
  processConnection,
  processLogging,
  processRequestBody,
  processRequestHeaders,
  processUri,
} from './transaction/request.ts';
import type { Intervention } from './transaction/interventions.ts';
import type { LoggedMessage } from './transaction/messages.ts';
import { Transaction } from './transaction/rule-loop.ts';
import { newBox } from './transaction/value-cache.ts';

export interface CompiledRulesOptions extends RuleSetOptions {}

/** Compiles our engine settings + CRS setup + CRS rules (the ModSecurity engine's load order). */
export function compileCrs(options: CompiledRulesOptions = {}): CompiledRuleSet {
  return compileRuleSet(ruleSetSources(options) as CompileSource[]);
}

function toMatched(m: LoggedMessage): WafMatchedRule {
  return {
    id: m.ruleId,
    message: m.message,
    matchedData: m.data === '' ? null : m.data,
    matchedVariable: m.matchedVar ?? null,
    severity: m.severity ?? null,
    tags: m.tags,
    phase: m.phase,
  };
}

function toInterrupt(it: Intervention, phase: number): WafInterrupt {
  return {
    status: it.status,
    ...(it.ruleId !== undefined ? { ruleId: it.ruleId } : {}),
    phase: it.phase ?? phase,
    ...(it.url ? { redirectUrl: it.url } : {}),
  };
}

function numberOrUndefined(value: string | undefined): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

export interface OpenCompiledTransaction {
  readonly tx: Transaction;
  readonly reported: number;
  readonly blocking: boolean;
}

export class CompiledInspector {
  readonly ruleSet: CompiledRuleSet;
  private readonly limits: { request: number; response: number };

  constructor(ruleSet: CompiledRuleSet, limits: { request: number; response: number }) {
    this.ruleSet = ruleSet;
    this.limits = limits;
  }

  static load(options: CompiledRulesOptions = {}): CompiledInspector {
    return new CompiledInspector(compileCrs(options), resolvedLimits(options));
  }

  get ruleCount(): number {
    return this.ruleSet.ruleCount;
  }

  /** Runs the request phases; with keepOpen the transaction is returned for the response phases. */
  inspectRequest(
    request: WafRequest,
    settings: WafEngineSettings,
    keepOpen = false,
  ): { verdict: WafEngineVerdict; open?: OpenCompiledTransaction } {
    checkSettings(settings);
    const blocking = settings.mode !== 'LOGGING';
    const tx = new Transaction(this.ruleSet, request.id);
    tx.setTx('paranoia_level', String(settings.paranoiaLevel));
    if (settings.anomalyThreshold !== undefined) tx.setTx('inbound_anomaly_score_threshold', String(settings.anomalyThreshold));
    for (const removal of removalsFor(request, settings.ruleExclusions)) {
      if (removal.target === undefined) tx.ruleRemoveById.push(removal.ruleId);
      else tx.ruleRemoveTargetById.push([removal.ruleId, removal.target]);
    }
    processConnection(tx, request.clientIp, request.clientPort, request.serverIp, request.serverPort);
    processUri(tx, request.uri, request.method, request.httpVersion);
    for (const [name, value] of request.headers) addRequestHeader(tx, name, value);
    processRequestHeaders(tx);
    let interrupt: WafInterrupt | undefined;
    const it1 = tx.takeIntervention();
    if (it1) interrupt = toInterrupt(it1, 1);
    let bodyTruncated = false;
    if (!(interrupt && blocking)) {
      const body = request.body;
      let text = '';
      if (body && body.length > 0) {
        bodyTruncated = body.length > this.limits.request;
        const clipped = bodyTruncated ? body.subarray(0, this.limits.request + 1) : body;
        text = appendRequestBody(tx, clipped).body;
      }
      processRequestBody(tx, text);
      const it2 = tx.takeIntervention();
      if (it2 && !interrupt) interrupt = toInterrupt(it2, 2);
    }
    if (!keepOpen) processLogging(tx);
    const score = numberOrUndefined(tx.getTx('anomaly_score'));
    const verdict: WafEngineVerdict = {
      matchedRules: tx.messages.map(toMatched),
      ...(score !== undefined ? { anomalyScore: score } : {}),
      ...(interrupt ? { interrupt } : {}),
      ...(bodyTruncated ? { bodyTruncated } : {}),
    };
    if (keepOpen && !(interrupt && blocking)) return { verdict, open: { tx, reported: tx.messages.length, blocking } };
    // (a transaction that was never held open dies young: no dispose() needed)
    if (keepOpen) processLogging(tx);
    return { verdict };
  }

  /** Response phases and logging of an open exchange. The verdict has the response's matches only. */
  inspectResponse(open: OpenCompiledTransaction, response: WafResponse): WafEngineVerdict {
    const { tx } = open;
    for (const [name, value] of response.headers) {
      tx.responseHeadersNames.push({ key: name, full: `RESPONSE_HEADERS_NAMES:${name}`, box: newBox(name), uk: undefined });
      tx.responseHeaders.push({ key: name, full: `RESPONSE_HEADERS:${name}`, box: newBox(value), uk: undefined });
      if (name.toLowerCase() === 'content-type') tx.setSingle('RESPONSE_CONTENT_TYPE', value);
      if (name.toLowerCase() === 'content-length') tx.setSingle('RESPONSE_CONTENT_LENGTH', value);
    }
    tx.setSingle('RESPONSE_STATUS', String(response.status));
    tx.setSingle('RESPONSE_PROTOCOL', `HTTP/${response.httpVersion}`);
    let interrupt: WafInterrupt | undefined;
    if (tx.engineState() !== 'Off') tx.evaluatePhase(3);
    const it3 = tx.takeIntervention();
    if (it3) interrupt = toInterrupt(it3, 3);
    let bodyTruncated = false;
    if (!(interrupt && open.blocking)) {
      const config = this.ruleSet.config;
      const body = response.body;
      const type = (tx.getSingle('RESPONSE_CONTENT_TYPE').split(';')[0] ?? '').trim().toLowerCase();
      const inspectBody = config.responseBodyAccess && config.responseBodyMimeTypes.includes(type);
      if (inspectBody && body && body.length > 0) {
        bodyTruncated = body.length > this.limits.response;
        let bytes = body;
        if (body.length > config.responseBodyLimit) {
          tx.setSingle('OUTBOUND_DATA_ERROR', '1');
          bytes = body.subarray(0, config.responseBodyLimit);
        }
        tx.setSingle('RESPONSE_BODY', Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1'));
      }
      if (tx.getSingle('OUTBOUND_DATA_ERROR') === '') tx.setSingle('OUTBOUND_DATA_ERROR', '0');
      if (tx.engineState() !== 'Off') tx.evaluatePhase(4);
      const it4 = tx.takeIntervention();
      if (it4 && !interrupt) interrupt = toInterrupt(it4, 4);
    }
    processLogging(tx);
    const score = numberOrUndefined(tx.getTx('outbound_anomaly_score'));
    const verdict: WafEngineVerdict = {
      matchedRules: tx.messages.slice(open.reported).map(toMatched),
      ...(score !== undefined ? { anomalyScore: score } : {}),
      ...(interrupt ? { interrupt } : {}),
      ...(bodyTruncated ? { bodyTruncated } : {}),
    };
    tx.dispose();
    return verdict;
  }

  endTransaction(open: OpenCompiledTransaction): void {
    processLogging(open.tx);
    open.tx.dispose();
  }
}
