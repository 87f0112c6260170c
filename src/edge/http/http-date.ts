/**
 * The Date header's value (RFC 9110 5.6.7, IMF-fixdate), formatted once a second for every
 * response written by hand in that second (the early path's 429, the front end's heads), as
 * node:http caches its own.
 */
let last = { second: Number.NaN, text: '' };
/** `currentHttpDate`'s value until its timer clears it at the next second. */
let current: string | undefined;

/** The Date value of `second` (Unix seconds; default: now). */
export function httpDate(second = Math.floor(Date.now() / 1000)): string {
  if (second !== last.second) last = { second, text: new Date(second * 1000).toUTCString() };
  return last.text;
}

/**
 * The Date value of now, as node:http's `utcDate()` keeps it: formatted on first use, kept until an
 * unref'd timer at the next second clears it, so that a response reads no clock.
 */
export function currentHttpDate(): string {
  if (current !== undefined) return current;
  const now = Date.now();
  current = httpDate(Math.floor(now / 1000));
  setTimeout(clearCurrent, 1000 - (now % 1000)).unref();
  return current;
}

function clearCurrent(): void {
  current = undefined;
}
