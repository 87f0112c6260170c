/**
 * The WAF engine interface: what the HTTP proxy's WAF phases call, whatever engine runs the rules.
 * Two implementations: our SecLang engine (compiled-engine.ts, the CRS compiled to JavaScript) and
 * ModSecurity v3 through its native addon (the optional package @tps/waf-modsecurity). Both take
 * the same request, the same per-proxy settings and give the same verdict, so the proxy and the
 * conformance runner do not know which one they talk to.
 *
 * The engine only judges; the proxy decides. A verdict says which rules matched and whether the
 * rule set asked to interrupt the request; blocking (BLOCKING mode) or letting it through and
 * logging (LOGGING mode), the block page, the WAF_EVENT and the audit log are the proxy's job.
 *
 * Byte strings: `uri`, header names and values are "binary" strings, one character per byte
 * (latin1), exactly as Node's http module hands them over; bodies are Buffers.
 */

/**
 * Headers in the order received, duplicates kept (binary strings), in either form: the flat list
 * `[name, value, name, value...]` that Node's `rawHeaders` and the proxy have (handed over as it
 * is: no array per header on the event loop, none to clone to an engine thread, none made there)
 * or `[name, value]` pairs. Engines read both (`isFlatHeaders`).
 */
export type WafHeaders = readonly string[] | ReadonlyArray<readonly [name: string, value: string]>;

/** One rule exclusion of a proxy (DESIGN: `waf.ruleExclusions[]`, schema RuleExclusion). */
export interface WafRuleExclusion {
  readonly ruleIds: readonly number[];
  /** Only requests whose normalized path starts with this (see exclusions.ts). */
  readonly pathPrefix?: string | undefined;
  /** Only this request field, ModSecurity-style: ARGS:q, REQUEST_COOKIES:session, REQUEST_HEADERS:User-Agent, ARGS. */
  readonly target?: string | undefined;
}

/**
 * Per-proxy WAF settings: data, never a new rule set. The traffic-config `Waf` object fits as is
 * (its other fields, like logMatchedData, are the proxy's business).
 */
export interface WafEngineSettings {
  /** 1-4. */
  readonly paranoiaLevel: number;
  /**
   * BLOCKING (default): the engine stops evaluating at the first interrupt, as a blocking web
   * server does. LOGGING: it evaluates every phase so the verdict lists every match.
   */
  readonly mode?: 'BLOCKING' | 'LOGGING' | undefined;
  /** Inbound anomaly score at which the rule set interrupts (CRS default 5). */
  readonly anomalyThreshold?: number | undefined;
  readonly ruleExclusions?: readonly WafRuleExclusion[] | undefined;
  /** Bounds of what one request may make the engine parse and inspect (input-limits.ts); absent fields: the defaults. */
  readonly inputLimits?: WafInputLimits | undefined;
}

/**
 * How much of a request the engine parses and inspects (DESIGN "Hostile input": ModSecurity's
 * SecArgumentsLimit, SecRequestBodyJsonDepthLimit and the like, per proxy). A request past one is
 * not parsed further and matches the limit's rule (input-limits.ts INPUT_LIMIT_RULES): refused in
 * BLOCKING mode, logged in LOGGING mode, as ModSecurity's rule 200007 in On / DetectionOnly.
 */
export interface WafInputLimits {
  /** Arguments (query string and body together: ARGS). */
  readonly arguments?: number | undefined;
  /** Parts of a multipart/form-data body. */
  readonly multipartParts?: number | undefined;
  /** Nesting of a JSON body (objects and arrays). */
  readonly jsonDepth?: number | undefined;
  /** Values of a JSON body (scalars and containers). */
  readonly jsonElements?: number | undefined;
  /** Nesting of an XML body's elements. */
  readonly xmlDepth?: number | undefined;
  /** Bytes of one argument's name or value. */
  readonly valueLength?: number | undefined;
}

export interface WafRequest {
  readonly clientIp: string;
  readonly clientPort: number;
  readonly serverIp: string;
  readonly serverPort: number;
  readonly method: string;
  /** Request target as received, with the query string (binary string). */
  readonly uri: string;
  /**
   * The path the proxy forwards (its canonical form, without the query). Given, it is what
   * exclusions' `pathPrefix` match, and the prefixes are taken as already in that form (the proxy
   * canonicalises them too); absent, both are normalised here (`normalizedPath`).
   */
  readonly path?: string | undefined;
  /** "1.0", "1.1", "2" ... (without "HTTP/"). */
  readonly httpVersion: string;
  /** In the order received, duplicates kept (binary strings); read until the verdict. */
  readonly headers: WafHeaders;
  /** The request body, or the part of it the proxy buffered; absent = no body. */
  readonly body?: Uint8Array | undefined;
  /** Support id of this exchange (32 hex): the engine uses it as its transaction id. */
  readonly id?: string | undefined;
  /**
   * Who the request is accounted to besides its client (the proxy's tenant): the engine's threads
   * are shared fairly between tenants by what their requests cost. Rules never see it.
   */
  readonly tenant?: string | undefined;
}

export interface WafResponse {
  readonly status: number;
  /** "1.1" ... (without "HTTP/"). */
  readonly httpVersion: string;
  /** In the order received (binary strings); read until the verdict. */
  readonly headers: WafHeaders;
  /** Body (text types only are inspected, see the engine's options); absent = not inspected. */
  readonly body?: Uint8Array | undefined;
}

export interface WafMatchedRule {
  /** Rule id (WAF_EVENT `modSecId`). */
  readonly id: number;
  /** Rule message, `msg` (WAF_EVENT `name`). */
  readonly message: string;
  /** What matched, the rule's `logdata` (may hold secrets: the event shows it only when the proxy says so); null when the rule has none. */
  readonly matchedData: string | null;
  /** The request field that matched when known (ARGS:q, REQUEST_HEADERS:User-Agent ...): the target of an exclusion made from this match. */
  readonly matchedVariable: string | null;
  /** Syslog-style severity: 0 EMERGENCY .. 7 DEBUG (CRS: 2 CRITICAL, 3 ERROR, 4 WARNING, 5 NOTICE); null when the rule has none. */
  readonly severity: number | null;
  readonly tags: readonly string[];
  /** SecLang phase the rule ran in (1-5). */
  readonly phase: number;
}

export interface WafInterrupt {
  /** HTTP status the rule set asked for (403 for CRS). */
  readonly status: number;
  /** The rule that interrupted, when known (949110 for the CRS inbound anomaly score). */
  readonly ruleId?: number | undefined;
  /** SecLang phase (1-5) in which it interrupted. */
  readonly phase?: number | undefined;
  /** For `redirect` rules. */
  readonly redirectUrl?: string | undefined;
}

export interface WafEngineVerdict {
  /** Every rule that matched and logs (CRS: every detection rule plus 949110/959100/980130 ...), in match order. */
  readonly matchedRules: readonly WafMatchedRule[];
  /** CRS anomaly score of this direction (inbound for a request verdict, outbound for a response), when the rule set keeps one. */
  readonly anomalyScore?: number | undefined;
  /** Present when the rule set asked to interrupt this exchange. */
  readonly interrupt?: WafInterrupt | undefined;
  /** True when the body was longer than the engine's body limit: only its first part was inspected. */
  readonly bodyTruncated?: boolean | undefined;
}

/**
 * A request whose response will be inspected too: the engine keeps its transaction open between
 * the two. Call `inspectResponse` or `end` exactly once; an exchange left open is closed by the
 * engine after its idle timeout.
 */
export interface WafExchange {
  readonly requestVerdict: WafEngineVerdict;
  /** Runs the response phases (and logging); the verdict covers the response rules only. */
  inspectResponse(response: WafResponse): Promise<WafEngineVerdict>;
  /** Ends the exchange without a response (blocked, upstream failed, client gone). */
  end(): void;
}

export interface WafEngine {
  /** "modsecurity", ... */
  readonly name: string;
  /** Request phases (headers, body), then logging: one request, one verdict. */
  inspectRequest(request: WafRequest, settings: WafEngineSettings): Promise<WafEngineVerdict>;
  /** Request phases, keeping the transaction open for the response phases. Optional: engines without response inspection omit it. */
  beginExchange?(request: WafRequest, settings: WafEngineSettings): Promise<WafExchange>;
  /** Frees everything; pending and later calls reject. */
  close(): Promise<void>;
}

/**
 * A request of a client whose inspections have used more than its share of the engine's threads
 * lately (fair-admission.ts, `expensiveClientShare`): refused uninspected, as an overloaded engine's
 * requests are (the proxy applies its `waf.failMode`), counted apart.
 */
export class WafCostShareError extends Error {
  readonly code = 'ERR_WAF_COST_SHARE';
  constructor(message: string) {
    super(message);
    this.name = 'WafCostShareError';
  }
}

/** An engine that cannot take more work right now (queue full): the proxy chooses fail-open or fail-closed. */
export class WafOverloadedError extends Error {
  readonly code = 'ERR_WAF_OVERLOADED';
  constructor(message: string) {
    super(message);
    this.name = 'WafOverloadedError';
  }
}

/** The engine was closed, or its worker died while running this request. */
export class WafUnavailableError extends Error {
  readonly code = 'ERR_WAF_UNAVAILABLE';
  constructor(message: string) {
    super(message);
    this.name = 'WafUnavailableError';
  }
}

/**
 * This transaction ran past its inspection budget and was ended (the engine checks its deadline
 * between steps); the thread and the other requests on it go on. The proxy applies its
 * `waf.failMode`, as for any request the WAF could not inspect.
 */
export class WafBudgetExceededError extends Error {
  readonly code = 'ERR_WAF_BUDGET';
  constructor(message: string) {
    super(message);
    this.name = 'WafBudgetExceededError';
  }
}

/** Bad settings (paranoia out of range, malformed exclusion ...). */
export class WafSettingsError extends Error {
  readonly code = 'ERR_WAF_SETTINGS';
  constructor(message: string) {
    super(message);
    this.name = 'WafSettingsError';
  }
}

/** Whether `headers` is the flat form `[name, value, name, value...]` (an empty list is both). */
export function isFlatHeaders(headers: WafHeaders): headers is readonly string[] {
  return headers.length === 0 || typeof headers[0] === 'string';
}

/** Headers as `[name, value]` pairs: these when they are already, else made from the flat list. */
export function headerPairs(headers: WafHeaders): ReadonlyArray<readonly [name: string, value: string]> {
  if (!isFlatHeaders(headers)) return headers;
  const pairs: [string, string][] = [];
  for (let i = 0; i + 1 < headers.length; i += 2) pairs.push([headers[i]!, headers[i + 1]!]);
  return pairs;
}

/** Headers as one flat array `[name, value, name, value...]`: these when they are already (one array to clone, not one per header). */
export function flatHeaders(headers: WafHeaders): readonly string[] {
  if (isFlatHeaders(headers)) return headers;
  const flat: string[] = [];
  for (const [name, value] of headers) flat.push(name, value);
  return flat;
}

/** Calls `each` with every header, in order, whatever the form. */
export function forEachHeader(headers: WafHeaders, each: (name: string, value: string) => void): void {
  if (isFlatHeaders(headers)) {
    for (let i = 0; i + 1 < headers.length; i += 2) each(headers[i]!, headers[i + 1]!);
  } else {
    for (const [name, value] of headers) each(name, value);
  }
}
