/**
 * Runs one exchange through ModSecurity, synchronously, in the calling thread (a worker of
 * engine.ts's pool in production). Owns one compiled rule set: the CRS with our engine
 * settings.
 *
 * Per-proxy settings are per-transaction data, never another rule set:
 * - paranoia level: `tx.paranoia_level` is set on the transaction before the first phase. CRS
 *   rule 901120 only sets its default when the variable is unset, and every rule above the level
 *   is skipped by the CRS's own paranoia markers, so one compiled CRS serves levels 1 to 4.
 * - anomaly threshold: likewise `tx.inbound_anomaly_score_threshold` (CRS 901100 default 5), read
 *   by the blocking rule 949110.
 * - rule exclusions: see @tps/waf's exclusions.ts (the transaction's ctl:ruleRemoveById /
 *   ctl:ruleRemoveTargetById lists).
 * load() checks once that the CRS setup does not overwrite the two variables (an operator who
 * uncomments SecAction 900000/900110 in crs-setup.conf would otherwise silently pin them).
 */
import { loadModSecurity } from './addon.ts';
import type { ModSecurityAddon, NativeMatchedRule, NativeRuleSet, NativeTransaction } from './addon.ts';
import { checkSettings, headerPairs, removalsFor, resolvedLimits, ruleSetSources } from '@tps/waf';
import type {
  PoolInspector,
  RuleSetOptions,
  WafEngineSettings,
  WafEngineVerdict,
  WafInterrupt,
  WafMatchedRule,
  WafRequest,
  WafResponse,
} from '@tps/waf';

/** An open exchange between its request and its response. */
export interface OpenTransaction {
  readonly tx: NativeTransaction;
  /** Matches already reported in the request verdict. */
  readonly reported: number;
  readonly blocking: boolean;
}

const VARIABLE_IN_MATCH = /against variable `([^`']*)'/;
const VARIABLE_IN_DATA = /found within ([A-Z_]+(?::.*?)?): /s;

function toMatchedRule(rule: NativeMatchedRule): WafMatchedRule {
  const variable = VARIABLE_IN_MATCH.exec(rule.match)?.[1] ?? VARIABLE_IN_DATA.exec(rule.data)?.[1] ?? null;
  return {
    id: rule.id,
    message: rule.message,
    matchedData: rule.data === '' ? null : rule.data,
    matchedVariable: variable === '' ? null : variable,
    severity: rule.severity,
    tags: rule.tags,
    phase: rule.phase,
  };
}

function numberOrUndefined(value: string | null): number | undefined {
  if (value === null || value === '') return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

export class ModSecurityInspector implements PoolInspector<OpenTransaction> {
  readonly ruleCount: number;
  private readonly addon: ModSecurityAddon;
  private readonly ruleSet: NativeRuleSet;
  private readonly limits: { request: number; response: number };

  private constructor(addon: ModSecurityAddon, ruleSet: NativeRuleSet, limits: { request: number; response: number }) {
    this.addon = addon;
    this.ruleSet = ruleSet;
    this.limits = limits;
    this.ruleCount = ruleSet.ruleCount;
  }

  /** Compiles the rule set (about 50 ms and 18 MB for the CRS). Throws with the source and ModSecurity's message. */
  static load(options: RuleSetOptions = {}): ModSecurityInspector {
    const addon = loadModSecurity();
    const limits = resolvedLimits(options);
    const ruleSet = new addon.RuleSet();
    try {
      for (const source of ruleSetSources(options)) {
        try {
          if ('file' in source) ruleSet.addFile(source.file);
          else ruleSet.addRules(source.text);
        } catch (error) {
          const where = 'file' in source ? source.file : source.name;
          throw new Error(`ModSecurity could not load ${where}: ${(error as Error).message}`, { cause: error });
        }
      }
      const inspector = new ModSecurityInspector(addon, ruleSet, limits);
      inspector.selfCheck();
      return inspector;
    } catch (error) {
      ruleSet.close();
      throw error;
    }
  }

  private selfCheck(): void {
    const tx = new this.addon.Transaction(this.ruleSet);
    try {
      tx.setVariable('paranoia_level', 3);
      tx.setVariable('inbound_anomaly_score_threshold', 7777);
      tx.processConnection('127.0.0.1', 1, '127.0.0.1', 80);
      tx.processUri('/', 'GET', '1.1');
      tx.addRequestHeaders([['Host', 'localhost']]);
      tx.processRequestHeaders();
      const level = tx.getVariable('paranoia_level');
      const threshold = tx.getVariable('inbound_anomaly_score_threshold');
      if (level !== '3' || threshold !== '7777') {
        throw new Error(
          'the CRS setup overwrites tx.paranoia_level or tx.inbound_anomaly_score_threshold for every request ' +
            `(got ${String(level)} / ${String(threshold)}); per-proxy paranoia levels and thresholds need them unset ` +
            '(leave SecAction 900000 and 900110 of crs-setup.conf commented out)',
        );
      }
    } finally {
      tx.close();
    }
  }

  /**
   * Request phases. With `keepOpen` the transaction stays open for inspectResponse (the caller
   * must then call inspectResponse or endTransaction); otherwise the logging phase runs and the
   * transaction is freed before this returns.
   */
  inspectRequest(
    request: WafRequest,
    settings: WafEngineSettings,
    keepOpen: boolean,
  ): { verdict: WafEngineVerdict; open?: OpenTransaction } {
    checkSettings(settings);
    const blocking = settings.mode !== 'LOGGING';
    const tx = new this.addon.Transaction(this.ruleSet, request.id);
    let handedOver = false;
    try {
      tx.setVariable('paranoia_level', settings.paranoiaLevel);
      if (settings.anomalyThreshold !== undefined) tx.setVariable('inbound_anomaly_score_threshold', settings.anomalyThreshold);
      for (const removal of removalsFor(request, settings.ruleExclusions)) {
        if (removal.target === undefined) tx.removeRuleById(removal.ruleId);
        else tx.removeRuleTargetById(removal.ruleId, removal.target);
      }
      tx.processConnection(request.clientIp, request.clientPort, request.serverIp, request.serverPort);
      tx.processUri(request.uri, request.method, request.httpVersion);
      tx.addRequestHeaders(headerPairs(request.headers));
      tx.processRequestHeaders();
      let interrupt = this.interruption(tx, 1);
      let bodyTruncated = false;
      if (!(interrupt && blocking)) {
        const body = request.body;
        if (body && body.length > 0) {
          // One byte over the limit is enough for ModSecurity to apply its limit policy and set
          // INBOUND_DATA_ERROR; the rest is never copied.
          bodyTruncated = body.length > this.limits.request;
          tx.appendRequestBody(bodyTruncated ? body.subarray(0, this.limits.request + 1) : body);
        }
        tx.processRequestBody();
        // Reading the intervention also clears it, which a LOGGING exchange needs: ModSecurity
        // stops each later phase after one rule while an intervention is pending.
        const phase2 = this.interruption(tx, 2);
        interrupt ??= phase2;
      }
      if (!keepOpen) {
        tx.processLogging();
      }
      const matched = tx.matchedRules();
      const score = numberOrUndefined(tx.getVariable('anomaly_score'));
      const verdict: WafEngineVerdict = {
        matchedRules: matched.map(toMatchedRule),
        ...(score !== undefined ? { anomalyScore: score } : {}),
        ...(interrupt ? { interrupt } : {}),
        ...(bodyTruncated ? { bodyTruncated } : {}),
      };
      if (keepOpen && !(interrupt && blocking)) {
        handedOver = true;
        return { verdict, open: { tx, reported: matched.length, blocking } };
      }
      if (keepOpen) tx.processLogging();
      return { verdict };
    } finally {
      if (!handedOver) tx.close();
    }
  }

  /** Response phases and logging of an open exchange; frees it. The verdict has the response's matches only. */
  inspectResponse(open: OpenTransaction, response: WafResponse): WafEngineVerdict {
    const { tx } = open;
    try {
      tx.addResponseHeaders(headerPairs(response.headers));
      tx.processResponseHeaders(response.status, `HTTP/${response.httpVersion}`);
      let interrupt = this.interruption(tx, 3);
      let bodyTruncated = false;
      if (!(interrupt && open.blocking)) {
        const body = response.body;
        if (body && body.length > 0) {
          bodyTruncated = body.length > this.limits.response;
          tx.appendResponseBody(bodyTruncated ? body.subarray(0, this.limits.response + 1) : body);
        }
        tx.processResponseBody();
        const phase4 = this.interruption(tx, 4);
        interrupt ??= phase4;
      }
      tx.processLogging();
      const matched = tx.matchedRules(open.reported);
      const score = numberOrUndefined(tx.getVariable('outbound_anomaly_score'));
      return {
        matchedRules: matched.map(toMatchedRule),
        ...(score !== undefined ? { anomalyScore: score } : {}),
        ...(interrupt ? { interrupt } : {}),
        ...(bodyTruncated ? { bodyTruncated } : {}),
      };
    } finally {
      tx.close();
    }
  }

  /** Ends an open exchange without a response (runs the logging phase, frees it). */
  endTransaction(open: OpenTransaction): void {
    try {
      if (!open.tx.closed) open.tx.processLogging();
    } finally {
      open.tx.close();
    }
  }

  close(): void {
    this.ruleSet.close();
  }

  private interruption(tx: NativeTransaction, phase: number): WafInterrupt | undefined {
    const it = tx.intervention();
    if (!it?.disruptive) return undefined;
    const log = it.log ?? '';
    const id = /\[id "(\d+)"\]/.exec(log)?.[1];
    const logPhase = /\(phase (\d)\)/.exec(log)?.[1];
    return {
      status: it.status,
      ...(id !== undefined ? { ruleId: Number(id) } : {}),
      phase: logPhase !== undefined ? Number(logPhase) : phase,
      ...(it.url ? { redirectUrl: it.url } : {}),
    };
  }
}
