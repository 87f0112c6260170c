/**
 * Header names compared without a lower-case copy (the hot path's many name checks). A module of
 * its own, importing nothing, so that parsers anywhere in the proxy can use it without an import
 * circle.
 */

/**
 * Whether `name` (from `at` on: a name inside a longer text, such as a response head) is `lower`
 * (an ASCII lower-case name) in any case: `name.toLowerCase() === lower` for the latin1 names
 * parsers hand over (a letter outside ASCII never lower-cases onto one in it), without making the
 * lower-case copy. The caller has checked that the lengths are equal.
 */
export function isNamed(name: string, lower: string, at = 0): boolean {
  for (let i = 0; i < lower.length; i++) {
    const c = name.charCodeAt(at + i);
    const l = lower.charCodeAt(i);
    if (c !== l && (c < 0x41 || c > 0x5a || c + 0x20 !== l)) return false;
  }
  return true;
}
