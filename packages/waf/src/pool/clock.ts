/**
 * `performance`, read once: the global is an accessor on globalThis, so each `performance.now()`
 * written as such costs a getter call besides the clock read (about 40 ns of the 110 here), and
 * the pool and its threads read the clock several times per request.
 */
export const clock: typeof performance = performance;
