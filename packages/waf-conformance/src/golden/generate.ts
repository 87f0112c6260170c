/**
 * CLI: writes the golden test vectors of @tps/waf (packages/waf/testdata/) and @tps/libinjection
 * (packages/libinjection/testdata/) from the reference engine: the cases of cases.ts and of the
 * CRS regression suite through the ModSecurity addon, its answers recorded. Run once when the
 * reference (ModSecurity, the CRS) or the cases change; the files are checked in, and
 * ../oracle/golden.test.ts checks that they still say what the live oracle says.
 *
 *   node packages/waf-conformance/src/golden/generate.ts SUITE     (e.g. ../shared/crs-regression-v3.3.4)
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { GOLDEN_DIR } from './vectors.ts';
import type { CrsVectors, GoldenSource, RuleCaseVectors, TransformationVectors } from './vectors.ts';
import { loadModSecurity } from '@tps/waf-modsecurity';
import { crsPayloads } from '../differential/corpus.ts';
import { buildGolden } from './build.ts';

const suite = process.argv[2];
if (suite === undefined || !existsSync(suite)) {
  process.stderr.write(
    `golden: give the CRS regression suite folder (e.g. ../shared/crs-regression-v3.3.4)${suite ? `: ${suite} does not exist` : ''}\n`,
  );
  process.exit(2);
}

const LIBINJECTION_DIR = fileURLToPath(new URL('../../../libinjection/testdata/', import.meta.url));
const source: GoldenSource = {
  oracle: `ModSecurity ${loadModSecurity().version} (addon), OWASP CRS from /usr/share/modsecurity-crs`,
  generatedBy: 'node packages/waf-conformance/src/golden/generate.ts ../shared/crs-regression-v3.3.4',
};

/** JSON with one case (or payload, or transformation) per line, so that a regenerated file diffs by case. */
function linewise(data: Record<string, unknown>): string {
  const parts = Object.entries(data).map(([key, value]) => {
    if (Array.isArray(value) && value.length > 0) return `${JSON.stringify(key)}: [\n${value.map((v) => JSON.stringify(v)).join(',\n')}\n]`;
    if (value !== null && typeof value === 'object' && !Array.isArray(value) && key === 'outputs') {
      return `${JSON.stringify(key)}: {\n${Object.entries(value)
        .map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`)
        .join(',\n')}\n}`;
    }
    return `${JSON.stringify(key)}: ${JSON.stringify(value)}`;
  });
  return `{\n${parts.join(',\n')}\n}\n`;
}

const write = (dir: string, name: string, data: object): void => {
  mkdirSync(dir, { recursive: true });
  const text = linewise(data as Record<string, unknown>);
  writeFileSync(`${dir}${name}`, text);
  process.stdout.write(`${dir}${name}: ${(text.length / 1024).toFixed(0)} KiB\n`);
};

const golden = buildGolden(suite, source);
write(GOLDEN_DIR, 'transformations.json', golden.transformations satisfies TransformationVectors);
write(GOLDEN_DIR, 'rule-cases.json', golden.ruleCases satisfies RuleCaseVectors);
write(GOLDEN_DIR, 'crs-blocking.json', golden.crsBlocking satisfies CrsVectors);
write(GOLDEN_DIR, 'crs-regression.json', golden.crsRegression satisfies CrsVectors);
write(GOLDEN_DIR, 'generated-corpus.json', golden.generatedCorpus satisfies CrsVectors);
write(GOLDEN_DIR, 'crs-payloads.json', {
  source: 'the payloads of the OWASP CRS v3.3.4 regression tests (query values, bodies, header values)',
  payloads: crsPayloads(suite),
});
write(LIBINJECTION_DIR, 'libinjection.json', golden.libinjection);
for (const [name, vectors] of [
  ['crs-regression', golden.crsRegression],
  ['generated-corpus', golden.generatedCorpus],
  ['crs-blocking', golden.crsBlocking],
] as const) {
  process.stdout.write(
    `${name}: ${vectors.cases.length} cases, ${vectors.knownDifferences.length} known differences ${vectors.knownDifferences.map((d) => d.name).join(' ')}\n`,
  );
}
