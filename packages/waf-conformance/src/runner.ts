/**
 * CRS conformance runner: sends every stage of every FTW test to a target and judges the outcome
 * the way go-ftw does (runner/run.go checkResult):
 * 1. an outcome without an HTTP answer passes when the stage expects an error, else fails;
 * 2. `status` (a number or a list): the answer's status must be one of them;
 * 3. `log_contains` / `no_log_contains`: a regular expression that must / must not match the
 *    request's WAF log. For the usual `id "942100"` form this is the matched rule id set;
 * 4. `expect_error` without an error, and nothing else to check, passes (as in go-ftw).
 * `response_contains` cannot be judged from the WAF alone: such a stage is skipped.
 * A test passes when all its stages pass; tests marked enabled: false are skipped.
 */
import type { FtwOutput, FtwStage, FtwTest } from './ftw.ts';
import { buildRequestBytes } from './ftw.ts';
import type { ConformanceTarget, StageOutcome } from './target.ts';

export type TestStatus = 'passed' | 'failed' | 'skipped';

export interface TestResult {
  readonly test: FtwTest;
  readonly status: TestStatus;
  /** Why it failed or was skipped. */
  readonly reason?: string;
  /** Outcome of each stage run. */
  readonly outcomes: readonly StageOutcome[];
}

export interface SuiteSummary {
  readonly results: readonly TestResult[];
  readonly passed: number;
  readonly failed: number;
  readonly skipped: number;
  /** passed + failed. */
  readonly run: number;
}

function toRegExp(pattern: string): RegExp {
  try {
    return new RegExp(pattern);
  } catch {
    return new RegExp(pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  }
}

function matchesLog(pattern: string, outcome: StageOutcome): boolean {
  const id = /^id "(\d+)"$/.exec(pattern.trim());
  if (id) return outcome.matchedRuleIds.includes(Number(id[1]));
  const re = toRegExp(pattern);
  const lines = outcome.logLines.length > 0 ? outcome.logLines : outcome.matchedRuleIds.map((n) => `[id "${n}"]`);
  return lines.some((line) => re.test(line));
}

function describe(outcome: StageOutcome): string {
  if (outcome.error !== undefined) return `error (${outcome.error})`;
  const note = outcome.note ? ` ${outcome.note}` : '';
  return `status ${outcome.status ?? '-'}${note}, rules [${[...new Set(outcome.matchedRuleIds)].join(',')}]`;
}

/** Null when the stage passes, else why not. */
export function judgeStage(output: FtwOutput, outcome: StageOutcome): string | null {
  if (outcome.error !== undefined) {
    return output.expect_error === true ? null : `unexpected error: ${outcome.error}`;
  }
  if (output.status !== undefined && output.status !== null) {
    const allowed = (Array.isArray(output.status) ? output.status : [output.status]).map(Number);
    if (outcome.status === undefined || !allowed.includes(outcome.status)) {
      return `status ${outcome.status ?? '-'} not in [${allowed.join(',')}]; ${describe(outcome)}`;
    }
  }
  if (typeof output.log_contains === 'string' && !matchesLog(output.log_contains, outcome)) {
    return `log does not contain ${output.log_contains}; ${describe(outcome)}`;
  }
  if (typeof output.no_log_contains === 'string' && matchesLog(output.no_log_contains, outcome)) {
    return `log contains ${output.no_log_contains}; ${describe(outcome)}`;
  }
  return null;
}

function destination(stage: FtwStage): { destAddr: string; port: number } {
  const port = Number(stage.input.port ?? 80);
  return { destAddr: String(stage.input.dest_addr ?? 'localhost'), port: Number.isInteger(port) ? port : 80 };
}

export async function runTest(test: FtwTest, target: ConformanceTarget): Promise<TestResult> {
  if (!test.enabled) return { test, status: 'skipped', reason: 'enabled: false', outcomes: [] };
  if (test.stages.length === 0) return { test, status: 'skipped', reason: 'no stages', outcomes: [] };
  if (test.stages.some((s) => typeof s.output.response_contains === 'string')) {
    return { test, status: 'skipped', reason: 'response_contains needs a real upstream', outcomes: [] };
  }
  const outcomes: StageOutcome[] = [];
  for (const [index, stage] of test.stages.entries()) {
    let outcome: StageOutcome;
    try {
      outcome = await target.send(buildRequestBytes(stage.input), destination(stage));
    } catch (error) {
      outcome = { error: `target failed: ${(error as Error).message}`, matchedRuleIds: [], logLines: [] };
    }
    outcomes.push(outcome);
    const reason = judgeStage(stage.output, outcome);
    if (reason !== null) {
      return { test, status: 'failed', reason: test.stages.length > 1 ? `stage ${index + 1}: ${reason}` : reason, outcomes };
    }
  }
  return { test, status: 'passed', outcomes };
}

/** Runs the tests, `concurrency` at a time, results in the tests' order. */
export async function runSuite(
  tests: readonly FtwTest[],
  target: ConformanceTarget,
  options: { concurrency?: number; onResult?: (result: TestResult) => void } = {},
): Promise<SuiteSummary> {
  const results: TestResult[] = new Array(tests.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const index = next++;
      const test = tests[index];
      if (test === undefined) return;
      const result = await runTest(test, target);
      results[index] = result;
      options.onResult?.(result);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 4) }, worker));
  const count = (status: TestStatus): number => results.filter((r) => r.status === status).length;
  const passed = count('passed');
  const failed = count('failed');
  return { results, passed, failed, skipped: count('skipped'), run: passed + failed };
}

/** Human-readable report: totals, then each failed test with its reason, then the skipped ones. */
export function formatReport(summary: SuiteSummary, title: string): string {
  const pct = summary.run === 0 ? 0 : (100 * summary.passed) / summary.run;
  const lines = [
    title,
    `passed ${summary.passed}, failed ${summary.failed}, skipped ${summary.skipped} ` +
      `(${summary.passed} of ${summary.run} run = ${pct.toFixed(1)} %)`,
  ];
  const failed = summary.results.filter((r) => r.status === 'failed');
  if (failed.length > 0) {
    lines.push('', 'failed:');
    for (const r of failed) lines.push(`  ${r.test.title}: ${r.reason ?? ''}`);
  }
  const skipped = summary.results.filter((r) => r.status === 'skipped');
  if (skipped.length > 0) {
    lines.push('', 'skipped:');
    for (const r of skipped) lines.push(`  ${r.test.title}: ${r.reason ?? ''}`);
  }
  return lines.join('\n');
}
