/**
 * What the disruptive actions leave for the caller: the intervention (status, redirect, the rule
 * and phase that asked for it) and the `allow` scopes that stop evaluation, as ModSecurity's
 * ModSecurityIntervention and RulesSet's allow types.
 */

export interface Intervention {
  status: number;
  disruptive: boolean;
  url: string | undefined;
  ruleId: number | undefined;
  phase: number | undefined;
}

/** No intervention pending. */
export function noIntervention(): Intervention {
  return { status: 200, disruptive: false, url: undefined, ruleId: undefined, phase: undefined };
}

/** Clears a pending intervention (`pass`, and reading it). */
export function clearIntervention(it: Intervention): void {
  it.status = 200;
  it.disruptive = false;
  it.url = undefined;
  it.ruleId = undefined;
  it.phase = undefined;
}

/** Reads and clears the pending intervention (what the addon's intervention() does); undefined when none. */
export function takeIntervention(it: Intervention): Intervention | undefined {
  if (!it.disruptive) return undefined;
  const copy = { ...it };
  clearIntervention(it);
  return copy;
}

/** Allow scopes (ModSecurity's AllowType): what `allow` lets through unevaluated. */
export const NONE_ALLOW = 0;
/** FromNowOnAllowType: every later phase but logging. */
export const ALLOW_ALL = 1;
/** RequestAllowType: the rest of the request phases. */
export const ALLOW_REQUEST = 2;
/** PhaseAllowType: the rest of this phase. */
export const ALLOW_PHASE = 3;
