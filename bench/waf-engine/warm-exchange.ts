/**
 * The compiled engine on the scenario the environment names (SCENARIO, PARANOIA; RESPONSE=0: the
 * request phases only), run for WARMUP_MS first: `exchange` runs one request and its response,
 * `label` names them. What profile.ts and garbage.ts measure.
 */
import { CompiledInspector } from '@tps/waf';
import { BENCH_RESPONSE, scenarioOf, settingsFromEnv } from './requests.ts';

export function warmedExchange(defaultWarmupMs: number): { exchange: () => void; label: string } {
  const scenario = scenarioOf(process.env.SCENARIO);
  const request = scenario.request;
  const settings = settingsFromEnv();
  const withResponse = process.env.RESPONSE !== '0';
  const inspector = CompiledInspector.load();
  const exchange = (): void => {
    const { open } = inspector.inspectRequest(request, settings, withResponse);
    if (open) inspector.inspectResponse(open, BENCH_RESPONSE);
  };
  const warmEnd = performance.now() + Number(process.env.WARMUP_MS ?? defaultWarmupMs);
  while (performance.now() < warmEnd) exchange();
  return { exchange, label: `${scenario.name} PL${settings.paranoiaLevel}${withResponse ? ' + response' : ''}` };
}
