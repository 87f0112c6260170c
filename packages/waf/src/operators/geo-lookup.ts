/** @geoLookup: no GeoIP database is configured, so it never matches (ModSecurity's fails then too). */
import type { OperatorDefinition } from './registry.ts';

export const geoLookupOperator: OperatorDefinition = {
  names: ['geolookup'],
  create: ({ base }) => ({ ...base, run: () => false }),
};
