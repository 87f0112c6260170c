/**
 * Types of the node's rate-limit counters, shared by the supervisor, the workers and the stores
 * (the settings spell the mode out: the control plane imports nothing of the edge).
 */

/** What a rate limit does with a request while the shared counter store (Redis) does not answer. */
export type RateLimitStoreFailureMode = 'local' | 'closed' | 'open';

/** TPS_RATE_LIMIT_STORE_FAILURE_MODE and TPS_RATE_LIMIT_STORE_TIMEOUT_MS. */
export interface RateLimitStoreSettings {
  failureMode: RateLimitStoreFailureMode;
  /** How long one counter call may wait for Redis's answer before it counts as a failure. */
  timeoutMs: number;
}
