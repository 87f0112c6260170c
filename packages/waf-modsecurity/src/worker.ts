/**
 * A thread of the ModSecurity engine's worker pool (engine.ts, @tps/waf's WorkerPool): compiles the
 * rule set once, then serves the pool (@tps/waf's serveInspector).
 */
import { serveInspector } from '@tps/waf';
import type { RuleSetOptions } from '@tps/waf';
import { ModSecurityInspector } from './inspector.ts';

serveInspector((options: RuleSetOptions) => ModSecurityInspector.load(options));
