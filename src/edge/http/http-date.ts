/**
 * The Date header's value (RFC 9110 5.6.7, IMF-fixdate), formatted once a second for every
 * response written by hand in that second (the early path's 429, the front end's heads), as
 * node:http caches its own.
 */
let last = { second: Number.NaN, text: '' };

/** The Date value of `second` (Unix seconds; default: now). */
export function httpDate(second = Math.floor(Date.now() / 1000)): string {
  if (second !== last.second) last = { second, text: new Date(second * 1000).toUTCString() };
  return last.text;
}
