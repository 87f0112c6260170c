/** t: a transformation of the rule's chain (t:none drops the ones before it and the SecDefaultAction's); transaction/value-cache.ts runs chains. */
import { TRANSFORMATION_ALIASES, TRANSFORMATIONS } from '../../transformations/index.ts';
import type { ActionParser } from './parsed.ts';
import { actionValue } from './parsed.ts';

export const parseTransformationAction: ActionParser = (action, out) => {
  const raw = actionValue(action).toLowerCase();
  const name = TRANSFORMATION_ALIASES.get(raw) ?? raw;
  if (name !== 'none' && !TRANSFORMATIONS.has(name)) throw new Error(`unknown transformation t:${action.value}`);
  out.transformations.push({ name, none: name === 'none' });
};
