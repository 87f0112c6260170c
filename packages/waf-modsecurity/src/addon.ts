/**
 * TypeScript face of the ModSecurity v3 Node-API addon (addon/addon.cc, built by build.sh into
 * build/Release/modsecurity.node). Thin: one RuleSet per compiled rule set, one Transaction per
 * HTTP exchange. Everything here is synchronous and CPU-bound: call it from a worker thread
 * (engine.ts's pool does), not from a proxy's event loop.
 *
 * Strings given to the addon are bytes: a string whose characters are all < U+0100 is taken as
 * latin1 (one byte per character, which is how Node's http module hands over URLs and headers),
 * any other string as UTF-8; Buffers and Uint8Arrays are taken as they are. Strings coming back are
 * UTF-8 when ModSecurity's bytes are valid UTF-8, else latin1.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export type Bytes = string | Uint8Array;

/** One logged rule match, as ModSecurity's RuleMessage has it. */
export interface NativeMatchedRule {
  id: number;
  /** SecLang phase of the rule: 1 request headers, 2 request body, 3 response headers, 4 response body, 5 logging. */
  phase: number;
  /** `msg`, macros expanded. */
  message: string;
  /** `logdata`, macros expanded (CRS: "Matched Data: ... found within ARGS:q: ..."). */
  data: string;
  /** ModSecurity's description of the match: operator, parameter, variable and value. */
  match: string;
  /** 0 (EMERGENCY) .. 7 (DEBUG), null when the rule has no severity. */
  severity: number | null;
  /** Note: ModSecurity 3.0.9 logs `multiMatch` rules before their tags are collected: [] for those. */
  tags: string[];
  /** True when this match's disruptive action ran (rule engine On). */
  disruptive: boolean;
  file: string | null;
  line: number;
  rev: string;
  ver: string;
  maturity: number;
  accuracy: number;
  reference: string;
  /** The error-log line a web server prints for this match; only when matchedRules(from, true). */
  log?: string;
}

export interface NativeIntervention {
  status: number;
  disruptive: boolean;
  pause: number;
  url: string | null;
  log: string | null;
}

export interface NativeRuleSet {
  /** Adds SecLang text; returns the number of rules added. Throws (code ERR_MODSEC_RULES) with ModSecurity's parser message. */
  addRules(text: string): number;
  /** Adds a SecLang file (Include and @pmFromFile paths relative to it). Throws like addRules. */
  addFile(path: string): number;
  /** Frees the rule set now, or when the last transaction that uses it is closed. */
  close(): void;
  readonly closed: boolean;
  readonly ruleCount: number;
}

export type TransactionStage =
  | 'new'
  | 'connection'
  | 'uri'
  | 'requestHeaders'
  | 'requestBody'
  | 'responseHeaders'
  | 'responseBody'
  | 'logging'
  | 'closed';

/**
 * Phases must be called in order (processConnection, processUri, headers, processRequestHeaders,
 * body, processRequestBody, response headers, processResponseHeaders, body, processResponseBody,
 * processLogging); processLogging may follow any phase. Anything else throws (code
 * ERR_MODSEC_STATE), as does any call after close().
 */
export interface NativeTransaction {
  readonly id: string | null;
  readonly stage: TransactionStage;
  readonly closed: boolean;
  readonly requestBodyLength: number;
  processConnection(clientIp: string, clientPort: number, serverIp: string, serverPort: number): void;
  /** `httpVersion` without "HTTP/", e.g. "1.1". */
  processUri(uri: Bytes, method: Bytes, httpVersion: Bytes): void;
  addRequestHeader(name: Bytes, value: Bytes): void;
  addRequestHeaders(headers: ReadonlyArray<readonly [Bytes, Bytes]>): void;
  processRequestHeaders(): void;
  /** False when the body went over SecRequestBodyLimit (the rest is dropped or rejected per SecRequestBodyLimitAction). */
  appendRequestBody(body: Bytes): boolean;
  processRequestBody(): void;
  addResponseHeader(name: Bytes, value: Bytes): void;
  addResponseHeaders(headers: ReadonlyArray<readonly [Bytes, Bytes]>): void;
  /** `protocol` like "HTTP/1.1". */
  processResponseHeaders(status: number, protocol?: string): void;
  appendResponseBody(body: Bytes): boolean;
  processResponseBody(): void;
  processLogging(): void;
  updateStatusCode(status: number): void;
  /** The pending intervention (and clears it in ModSecurity), or null. */
  intervention(): NativeIntervention | null;
  /** Logged matches from index `from` on; `withLog` adds the error-log line to each. */
  matchedRules(from?: number, withLog?: boolean): NativeMatchedRule[];
  /** What `ctl:ruleRemoveById=id` does, for this transaction. */
  removeRuleById(id: number): void;
  /** What `ctl:ruleRemoveTargetById=id;target` does: target is "ARGS", "ARGS:q", "REQUEST_COOKIES:session"... byte-exact. */
  removeRuleTargetById(id: number, target: string): void;
  /** What `ctl:ruleEngine=...` does, for this transaction. */
  setRuleEngine(mode: 'On' | 'DetectionOnly' | 'Off'): void;
  /** Sets tx.<name>; set before processConnection, every rule sees it (as if crs-setup had set it). */
  setVariable(name: string, value: string | number | Uint8Array): void;
  getVariable(name: string): string | null;
  /** Frees the native transaction (msc_transaction_cleanup). Idempotent. */
  close(): void;
}

export interface ModSecurityAddon {
  RuleSet: new () => NativeRuleSet;
  Transaction: new (ruleSet: NativeRuleSet, id?: string) => NativeTransaction;
  /** libmodsecurity version, e.g. "3.0.9". */
  version: string;
  whoAmI(): string;
}

/** Where build.sh puts the addon. */
export const addonPath: string = fileURLToPath(new URL('../build/Release/modsecurity.node', import.meta.url));

/** Whether the addon is built (tests that use ModSecurity as their oracle skip without it, and say so). */
export function modSecurityAddonBuilt(): boolean {
  return existsSync(addonPath);
}

let cached: ModSecurityAddon | undefined;

/** Loads the addon (once per thread). Throws a clear error when it has not been built. */
export function loadModSecurity(): ModSecurityAddon {
  if (cached) return cached;
  if (!existsSync(addonPath)) {
    throw new Error(
      `ModSecurity addon not built: ${addonPath} is missing. Run: bash packages/waf-modsecurity/build.sh ` +
        '(needs libmodsecurity-dev and npm_config_nodedir pointing at the headers of this Node; scripts/setup.sh --modsecurity does both)',
    );
  }
  const require = createRequire(import.meta.url);
  cached = require(addonPath) as ModSecurityAddon;
  return cached;
}
