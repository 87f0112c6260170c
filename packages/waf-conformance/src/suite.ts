/**
 * Where the OWASP CRS v3.3.4 regression suite (FTW YAML) is: always given, never guessed. The CLIs
 * take it as an argument; the tests read TPS_CRS_REGRESSION_SUITE, which scripts/test.sh sets to
 * ../shared/crs-regression-v3.3.4 when that folder is present. Tests that need the suite skip,
 * saying why, when it was not given.
 */
import { existsSync } from 'node:fs';

export const SUITE_VARIABLE = 'TPS_CRS_REGRESSION_SUITE';

/** The suite folder the tests were given, when it exists. */
export function givenSuite(): string | undefined {
  const folder = process.env[SUITE_VARIABLE];
  return folder !== undefined && folder !== '' && existsSync(folder) ? folder : undefined;
}

/** The `skip` option of a test that needs the suite: false when it was given, else the reason. */
export function skipWithoutSuite(): false | string {
  if (givenSuite() !== undefined) return false;
  const folder = process.env[SUITE_VARIABLE];
  return folder
    ? `the CRS regression suite ${SUITE_VARIABLE}=${folder} does not exist`
    : `the CRS regression suite was not given (${SUITE_VARIABLE}=folder; scripts/test.sh passes ../shared/crs-regression-v3.3.4 when present)`;
}
