/**
 * early-refusal.test.ts again with the native refusal engine off (TPS_EARLY_REFUSAL_ENGINE=javascript,
 * or where it is not built): every refused request answered on the JavaScript path alone.
 */
import { configureRefusalEngine } from './refusal-engine.ts';

configureRefusalEngine('javascript');
await import('./early-refusal.test.ts');
