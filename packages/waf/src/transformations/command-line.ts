/**
 * cmdLine: command lines as a shell or cmd.exe sees them.
 */
import { scratchFor } from './bytes.ts';

/** cmdLine's treatment of each byte: kept (0), deleted, a space, or an upper-case letter. */
const CMDLINE_KEEP = 0;

export const CMDLINE_DELETE = 1;

const CMDLINE_SPACE = 2;

const CMDLINE_UPPER = 3;

export const CMDLINE_KIND = new Uint8Array(256);
for (const c of '"\'\\^') CMDLINE_KIND[c.charCodeAt(0)] = CMDLINE_DELETE;
for (const c of ' ,;\t\r\n') CMDLINE_KIND[c.charCodeAt(0)] = CMDLINE_SPACE;
for (let c = 0x41; c <= 0x5a; c++) CMDLINE_KIND[c] = CMDLINE_UPPER;

/**
 * ModSecurity's cmdLine: deletes " ' \ ^, turns each run of space , ; \t \r \n into one space
 * (a deleted character does not end the run), drops a space before / or (, lower-cases ASCII.
 */
export function cmdLine(s: string): string {
  const n = s.length;
  let first = 0;
  while (first < n && CMDLINE_KIND[s.charCodeAt(first)] === CMDLINE_KEEP) first++;
  if (first === n) return s;
  const out = scratchFor(n + 1);
  // (the kept prefix copied in the loop: one call into C++ per value, the decode at the end)
  let o = 0;
  for (; o < first; o++) out[o] = s.charCodeAt(o);
  let space = false;
  for (let i = first; i < n; i++) {
    const c = s.charCodeAt(i);
    const kind = CMDLINE_KIND[c];
    if (kind === CMDLINE_SPACE) space = true;
    else if (kind === CMDLINE_KEEP) {
      if (space) {
        if (c !== 0x2f && c !== 0x28) out[o++] = 0x20;
        space = false;
      }
      out[o++] = c;
    } else if (kind === CMDLINE_UPPER) {
      if (space) {
        out[o++] = 0x20;
        space = false;
      }
      out[o++] = c + 0x20;
    }
  }
  if (space) out[o++] = 0x20;
  const result = out.toString('latin1', 0, o);
  return result === s ? s : result;
}
