/**
 * The one rate estimate every per-client counter of the edge uses: rate limits (in this thread's
 * memory, in memory shared by the workers, in Redis) and the connection caps' new connections per
 * second (layer 4 and HTTP, per thread and shared).
 *
 * Cloudflare's and Pingora's sliding-window estimate (pingora-limits/src/rate.rs,
 * https://blog.cloudflare.com/counting-things-a-lot-of-different-things/): per period `p`, two fixed
 * windows aligned on multiples of `p`; the events over the last `p` are estimated as
 *     previous * (1 - elapsed / p) + current
 * where `elapsed` is the time since the current window began. Two numbers per period and key,
 * within a few percent of an exact sliding log, and no per-event timestamps.
 *
 * A window pair is three float64 words wherever it lives (a typed array of its own, a slot of a
 * SharedArrayBuffer table): [window index (now / p, rounded down), previous window's count, current
 * window's count]; all zeros is an empty pair. The Redis store runs the same steps in Lua
 * (redis-rate-store.ts), on the same three numbers.
 */

/** Words of one window pair. */
export const WINDOW_PAIR_WORDS = 3;

const INDEX = 0;
const PREVIOUS = 1;
const CURRENT = 2;

/**
 * Moves the pair at `words[offset]` to the window of `now`: the current window becomes the previous
 * one, unless a whole window passed without events (then both start from zero).
 */
function roll(words: Float64Array, offset: number, periodMs: number, now: number): number {
  const index = Math.floor(now / periodMs);
  const seen = words[offset + INDEX]!;
  if (index !== seen) {
    words[offset + PREVIOUS] = index === seen + 1 ? words[offset + CURRENT]! : 0;
    words[offset + CURRENT] = 0;
    words[offset + INDEX] = index;
  }
  return index;
}

/** Counts one event at `now` and returns the estimate of events over the last `periodMs`, this one included. */
export function countAndEstimate(words: Float64Array, offset: number, periodMs: number, now: number): number {
  const index = roll(words, offset, periodMs, now);
  const current = words[offset + CURRENT]! + 1;
  words[offset + CURRENT] = current;
  return words[offset + PREVIOUS]! * (1 - (now - index * periodMs) / periodMs) + current;
}

/** The estimate of events over the last `periodMs` at `now`, counting nothing (`countEvent` may follow). */
export function estimate(words: Float64Array, offset: number, periodMs: number, now: number): number {
  const index = roll(words, offset, periodMs, now);
  return words[offset + PREVIOUS]! * (1 - (now - index * periodMs) / periodMs) + words[offset + CURRENT]!;
}

/** Counts one event in the window `estimate` has just rolled to. */
export function countEvent(words: Float64Array, offset: number): void {
  words[offset + CURRENT]! += 1;
}
