/**
 * The golden test vectors in @tps/waf's testdata/: requests in, what ModSecurity v3.0.9 (the
 * reference engine) answered out, written once by golden/generate.ts and checked in, so that
 * @tps/waf's tests compare our engine with the reference without the addon (they reach these
 * helpers as test tooling, a dev dependency; the engine's public exports have none of them). The
 * live comparison is golden/golden.test.ts (where the addon is built).
 *
 * Requests are JSON: the URI and header values as they are (binary strings: one character per
 * byte, JSON-escaped), the body in base64.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { headerPairs } from '@tps/waf';
import type { RuleSetOptions, WafEngineSettings, WafRequest } from '@tps/waf';

/** The folder of the golden vectors: @tps/waf's testdata/ (beside its src/, where its entry is). */
export const GOLDEN_DIR = fileURLToPath(new URL('../testdata/', import.meta.resolve('@tps/waf')));

export interface GoldenRequest {
  readonly clientIp: string;
  readonly clientPort: number;
  readonly serverIp: string;
  readonly serverPort: number;
  readonly method: string;
  readonly uri: string;
  readonly httpVersion: string;
  readonly headers: readonly (readonly [string, string])[];
  /** base64 */
  readonly body?: string | undefined;
}

/** Where a file of vectors came from. */
export interface GoldenSource {
  /** "ModSecurity 3.0.9 (addon), CRS 3.3.4 (Debian)" ... */
  readonly oracle: string;
  readonly generatedBy: string;
}

/** transformations.json: each transformation's output for each input, as the addon logged it. */
export interface TransformationVectors extends GoldenSource {
  readonly inputs: readonly string[];
  /** Transformation name -> outputs, parallel to `inputs` (in the addon's string form, see addonString()). */
  readonly outputs: Readonly<Record<string, readonly string[]>>;
}

/** rule-cases.json: small rule sets (operators, body processors) on one request each. */
export interface RuleCaseVectors extends GoldenSource {
  readonly cases: readonly {
    readonly name: string;
    readonly rules: string;
    readonly request: GoldenRequest;
    /** Only the matches of this rule id count. */
    readonly onlyRule?: number | undefined;
    /** Lines are the rules' logdata only (else `id logdata`). */
    readonly dataOnly?: boolean | undefined;
    /** What ModSecurity logged, as sorted lines (in the addon's string form). */
    readonly expected: readonly string[];
  }[];
}

/** A request through the whole rule set, and the rule ids ModSecurity matched. */
export interface CrsVector {
  readonly name: string;
  readonly request: GoldenRequest;
  readonly settings: WafEngineSettings;
  /** Matched rule ids, sorted, each once. */
  readonly ids: readonly number[];
  /** The interrupt's status, when the rule set interrupted. */
  readonly interrupt?: number | undefined;
  readonly anomalyScore?: number | undefined;
}

/** crs-regression.json, generated-corpus.json, crs-blocking.json. */
export interface CrsVectors extends GoldenSource {
  /** The rule set both engines loaded (rule-set.ts options). */
  readonly ruleSet: RuleSetOptions;
  readonly cases: readonly CrsVector[];
  /**
   * Cases where ModSecurity's answer is not reproducible (undefined behaviour in 3.0.9, see
   * docs/waf-conformance.md): their names, with what each engine gave when the file was written.
   */
  readonly knownDifferences: readonly {
    readonly name: string;
    readonly ours: readonly number[];
    readonly modsecurity: readonly number[];
  }[];
}

export function encodeRequest(request: WafRequest): GoldenRequest {
  return {
    clientIp: request.clientIp,
    clientPort: request.clientPort,
    serverIp: request.serverIp,
    serverPort: request.serverPort,
    method: request.method,
    uri: request.uri,
    httpVersion: request.httpVersion,
    headers: headerPairs(request.headers).map(([name, value]) => [name, value] as const),
    ...(request.body !== undefined
      ? { body: Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength).toString('base64') }
      : {}),
  };
}

export function decodeRequest(request: GoldenRequest): WafRequest {
  const { body, ...rest } = request;
  return body !== undefined ? { ...rest, body: Buffer.from(body, 'base64') } : rest;
}

/** Reads testdata/`name` of @tps/waf. */
export function readGolden<T>(name: string): T {
  return JSON.parse(readFileSync(`${GOLDEN_DIR}${name}`, 'utf8')) as T;
}

/**
 * The form in which the addon hands back ModSecurity's bytes: UTF-8 text when they are valid
 * UTF-8, else one character per byte. Our binary strings are compared in that form.
 */
export function addonString(binary: string): string {
  const bytes = Buffer.from(binary, 'latin1');
  const utf8 = bytes.toString('utf8');
  return Buffer.from(utf8, 'utf8').equals(bytes) ? utf8 : binary;
}

/** What a small rule set of rule-cases.json is loaded with before its own rules. */
export const SMALL_RULE_SET_PREAMBLE = 'SecRuleEngine DetectionOnly\nSecRequestBodyAccess On\nSecRequestBodyLimit 1048576\n';

/** A rule case's matches as its sorted lines (`id logdata`, or the logdata only), in the addon's string form. */
export function ruleCaseLines(
  matches: readonly { readonly id: number; readonly data: string }[],
  onlyRule: number | undefined,
  dataOnly: boolean | undefined,
  binary: boolean,
): string[] {
  return matches
    .filter((m) => onlyRule === undefined || m.id === onlyRule)
    .map((m) => {
      const data = binary ? addonString(m.data) : m.data;
      return dataOnly ? data : `${m.id} ${data}`;
    })
    .sort();
}
