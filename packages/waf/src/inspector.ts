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
import { isFlatHeaders } from './engine.ts';
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

const warmed = new WeakSet<CompiledRuleSet>();

function warmUpRequest(uri: string, contentType: string, body: string): WafRequest {
  const bytes = Buffer.from(body, 'latin1');
  return {
    clientIp: '192.0.2.1',
    clientPort: 40000,
    serverIp: '192.0.2.2',
    serverPort: 80,
    method: 'POST',
    uri,
    httpVersion: '1.1',
    headers: [
      ['Host', 'warm-up.invalid'],
      ['User-Agent', 'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0'],
      ['Accept', 'text/html,application/json;q=0.9,*/*;q=0.8'],
      ['Cookie', 'session=abc123; theme=dark'],
      ['Content-Type', contentType],
      ['Content-Length', String(bytes.length)],
    ],
    body: bytes,
  };
}

/**
 * A value past the length from which expressions run on V8's linear engine (regex/runtime.ts):
 * each expression's linear copy is compiled the first time a long value meets it, a few hundred
 * compilations that would otherwise land inside the budget of the first client sending long
 * values. With "\n" and "\r\n" too: each line-ending form has its own copy.
 */
const LONG_VALUE = encodeURIComponent('a<b c="d"> select from -- '.repeat(200));

/** Benign and hostile-looking values of each body kind: most of the rule set's expressions run once. */
const WARM_UP_REQUESTS: readonly WafRequest[] = [
  warmUpRequest(
    '/long',
    'application/x-www-form-urlencoded',
    `a=${LONG_VALUE}&b=${LONG_VALUE}%0A${LONG_VALUE}&c=${LONG_VALUE}%0D%0A${LONG_VALUE}`,
  ),
  warmUpRequest('/search?q=red+shoes&page=2', 'application/x-www-form-urlencoded', 'name=Jane+Doe&comment=Hello+there'),
  warmUpRequest(
    "/?id=1'%20or%20'1'%3D'1&f=../../etc/passwd",
    'application/x-www-form-urlencoded',
    'q=%3Cscript%3Ealert(1)%3C%2Fscript%3E&c=%3Bcat+%2Fetc%2Fpasswd&s=union+select+1,2--',
  ),
  warmUpRequest('/api/items', 'application/json', '{"items":[{"id":1,"name":"<img src=x onerror=alert(1)>"}],"q":"1 OR 1=1"}'),
  warmUpRequest('/soap', 'text/xml', '<?xml version="1.0"?><a b="c"><d>select * from users</d></a>'),
  warmUpRequest(
    '/upload',
    'multipart/form-data; boundary=WarmUp',
    '--WarmUp\r\nContent-Disposition: form-data; name="title"\r\n\r\n<?php system($_GET[1]); ?>\r\n' +
      '--WarmUp\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--WarmUp--\r\n',
  ),
];

const WARM_UP_RESPONSE: WafResponse = {
  status: 200,
  httpVersion: '1.1',
  headers: [['Content-Type', 'text/html']],
  body: Buffer.from('<html><body>SQL syntax error near line 1; Warning: mysql_fetch_array()</body></html>'),
};

export interface OpenCompiledTransaction {
  readonly tx: Transaction;
  readonly reported: number;
  readonly blocking: boolean;
}

export class CompiledInspector {
  readonly ruleSet: CompiledRuleSet;
  private readonly limits: { request: number; response: number };
  /** Thread CPU time one inspection (request side, or response side) may use before it ends; 0: none. */
  private budgetMs: number;

  /**
   * `budgetMs`: each inspection's budget, measured from its own start (never its wait in a queue);
   * past it the transaction ends with WafBudgetExceededError (TransactionCollections.startBudget).
   */
  constructor(ruleSet: CompiledRuleSet, limits: { request: number; response: number }, budgetMs = 0) {
    this.ruleSet = ruleSet;
    this.limits = limits;
    if (!Number.isFinite(budgetMs) || budgetMs < 0) throw new RangeError('budgetMs must be a finite number >= 0');
    this.budgetMs = budgetMs;
  }

  /**
   * Runs a few requests through every phase, without a budget, so that a new thread's first
   * requests do not pay for what V8 does on first use (regular expressions compiled, code
   * optimized): a cold rule set takes ~100 ms over its first request, which would count against
   * that request's budget. Once per rule set and thread.
   */
  warmUp(): void {
    if (warmed.has(this.ruleSet)) return;
    warmed.add(this.ruleSet);
    const budget = this.budgetMs;
    this.budgetMs = 0;
    try {
      for (const request of WARM_UP_REQUESTS) {
        const { open } = this.inspectRequest(request, { paranoiaLevel: 4, mode: 'LOGGING' }, true);
        if (open) this.inspectResponse(open, WARM_UP_RESPONSE);
      }
    } catch {
      // A rule set that cannot evaluate these requests fails the requests that hit the same
      // problem, later, one by one: it is no reason for the engine not to start.
    } finally {
      this.budgetMs = budget;
    }
  }

  /** `cpuAtStartMicros`: the thread's CPU time at the inspection's start, when the caller has it. */
  private startClock(tx: Transaction, cpuAtStartMicros: number | undefined): void {
    if (this.budgetMs === 0) return;
    if (cpuAtStartMicros === undefined) tx.startBudget(this.budgetMs);
    else tx.startBudget(this.budgetMs, cpuAtStartMicros);
  }

  static load(options: CompiledRulesOptions = {}, budgetMs = 0): CompiledInspector {
    return new CompiledInspector(compileCrs(options), resolvedLimits(options), budgetMs);
  }

  get ruleCount(): number {
    return this.ruleSet.ruleCount;
  }

  /**
   * Runs the request phases; with keepOpen the transaction is returned for the response phases.
   * `cpuAtStartMicros`: this thread's CPU time (threadCpuMicros) read by the caller just before, the
   * budget's start; absent, the budget reads it itself.
   */
  inspectRequest(
    request: WafRequest,
    settings: WafEngineSettings,
    keepOpen = false,
    cpuAtStartMicros?: number,
  ): { verdict: WafEngineVerdict; open?: OpenCompiledTransaction } {
    const inputLimits = checkSettings(settings);
    const blocking = settings.mode !== 'LOGGING';
    const tx = new Transaction(this.ruleSet, request.id);
    this.startClock(tx, cpuAtStartMicros);
    tx.inputLimits = inputLimits;
    tx.setTx('paranoia_level', String(settings.paranoiaLevel));
    if (settings.anomalyThreshold !== undefined) tx.setTx('inbound_anomaly_score_threshold', String(settings.anomalyThreshold));
    for (const removal of removalsFor(request, settings.ruleExclusions)) {
      if (removal.target === undefined) tx.ruleRemoveById.push(removal.ruleId);
      else tx.ruleRemoveTargetById.push([removal.ruleId, removal.target]);
    }
    processConnection(tx, request.clientIp, request.clientPort, request.serverIp, request.serverPort);
    processUri(tx, request.uri, request.method, request.httpVersion);
    const headers = request.headers;
    if (isFlatHeaders(headers)) for (let i = 0; i + 1 < headers.length; i += 2) addRequestHeader(tx, headers[i]!, headers[i + 1]!);
    else for (const [name, value] of headers) addRequestHeader(tx, name, value);
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
  inspectResponse(open: OpenCompiledTransaction, response: WafResponse, cpuAtStartMicros?: number): WafEngineVerdict {
    const { tx } = open;
    this.startClock(tx, cpuAtStartMicros);
    const headers = response.headers;
    if (isFlatHeaders(headers)) for (let i = 0; i + 1 < headers.length; i += 2) addResponseHeader(tx, headers[i]!, headers[i + 1]!);
    else for (const [name, value] of headers) addResponseHeader(tx, name, value);
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

function addResponseHeader(tx: Transaction, name: string, value: string): void {
  tx.responseHeadersNames.push({ key: name, full: `RESPONSE_HEADERS_NAMES:${name}`, box: newBox(name), uk: undefined });
  tx.responseHeaders.push({ key: name, full: `RESPONSE_HEADERS:${name}`, box: newBox(value), uk: undefined });
  const lower = name.toLowerCase();
  if (lower === 'content-type') tx.setSingle('RESPONSE_CONTENT_TYPE', value);
  else if (lower === 'content-length') tx.setSingle('RESPONSE_CONTENT_LENGTH', value);
}
