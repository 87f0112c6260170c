/**
 * @tps/waf-conformance (private): the OWASP CRS regression (FTW) runner with its in-process target,
 * the differential harness of our engine against ModSecurity, and the generator of @tps/waf's golden
 * test vectors. CLIs: run.ts, differential/run.ts, golden/generate.ts. The target through the
 * product's proxy is the product's test (test/waf-conformance/): a package imports nothing of src/.
 */
export { buildRequestBytes, loadFtwTests, parseFtwFile } from './ftw.ts';
export type { FtwOutput, FtwStage, FtwTest } from './ftw.ts';
export { parseRawRequest } from './raw-http.ts';
export { formatReport, judgeStage, runSuite } from './runner.ts';
export { conformanceCli, type TargetFactory } from './run.ts';
export {
  CRS_REGRESSION_SETTINGS,
  CRS_REGRESSION_SETUP,
  crsRegressionEngine,
  crsRegressionEngineOptions,
  ENGINE_NAMES,
  InProcessTarget,
  logLine,
} from './target.ts';
export type { ConformanceTarget, EngineName, StageDestination, StageOutcome } from './target.ts';
export { Random, uint32s } from './random.ts';
export {
  addonString,
  decodeRequest,
  encodeRequest,
  GOLDEN_DIR,
  readGolden,
  ruleCaseLines,
  SMALL_RULE_SET_PREAMBLE,
} from './golden/vectors.ts';
export type { CrsVector, CrsVectors, GoldenRequest, GoldenSource, RuleCaseVectors, TransformationVectors } from './golden/vectors.ts';
export { givenSuite, skipWithoutSuite, SUITE_VARIABLE } from './suite.ts';
