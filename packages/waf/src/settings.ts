/**
 * Per-proxy settings both engines apply the same way (paranoia level, anomaly threshold,
 * exclusions: transaction data, never another rule set); this checks that they can be applied.
 */
import type { WafEngineSettings } from './engine.ts';
import { WafSettingsError } from './engine.ts';
import { validateExclusion } from './exclusions.ts';
import { type ResolvedInputLimits, resolveInputLimits } from './input-limits.ts';

/**
 * Settings objects checked already, and their input limits: a proxy hands the engine the same
 * object with each request (until its configuration changes), checked once. Settings are never
 * changed in place once handed to an engine.
 */
const checked = new WeakMap<WafEngineSettings, ResolvedInputLimits>();

/** Throws WafSettingsError for settings the engines cannot apply; the input limits they resolve to. */
export function checkSettings(settings: WafEngineSettings): ResolvedInputLimits {
  const known = checked.get(settings);
  if (known !== undefined) return known;
  const limits = checkedLimits(settings);
  checked.set(settings, limits);
  return limits;
}

function checkedLimits(settings: WafEngineSettings): ResolvedInputLimits {
  const level = settings.paranoiaLevel;
  if (!Number.isInteger(level) || level < 1 || level > 4) {
    throw new WafSettingsError(`paranoiaLevel must be 1-4, got ${String(level)}`);
  }
  const threshold = settings.anomalyThreshold;
  if (threshold !== undefined && (!Number.isInteger(threshold) || threshold < 1 || threshold > 1_000_000)) {
    throw new WafSettingsError(`anomalyThreshold must be a positive integer, got ${String(threshold)}`);
  }
  for (const exclusion of settings.ruleExclusions ?? []) validateExclusion(exclusion);
  return resolveInputLimits(settings.inputLimits);
}
