/**
 * Byte helpers the transformations share (hex digits, C isspace(), building binary strings).
 */

export type Transformation = (input: string) => string;

export const isHex = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

/** ModSecurity's x2c: two hex digits to a byte. */
export function x2c(a: number, b: number): number {
  const hi = a >= 0x41 ? (a & 0xdf) - 0x41 + 10 : a - 0x30;
  const lo = b >= 0x41 ? (b & 0xdf) - 0x41 + 10 : b - 0x30;
  return (hi * 16 + lo) & 0xff;
}

export function xsingle(a: number): number {
  return (a >= 0x41 ? (a & 0xdf) - 0x41 + 10 : a - 0x30) & 0xff;
}

/** C isspace() in the "C" locale. */
export const isSpace = (c: number): boolean => c === 0x20 || (c >= 0x09 && c <= 0x0d);

/** Builds a binary string from byte codes in chunks (String.fromCharCode has an argument limit). */
export function fromCodes(codes: number[] | Uint8Array, length: number = codes.length): string {
  if (length === codes.length && length <= 8192) return String.fromCharCode.apply(null, codes as number[]);
  let out = '';
  for (let i = 0; i < length; i += 8192) {
    out += String.fromCharCode.apply(null, Array.prototype.slice.call(codes, i, Math.min(length, i + 8192)) as number[]);
  }
  return out;
}

/**
 * Scratch bytes for transformations that build their result byte by byte: one Buffer, grown on
 * demand, read back with a latin1 decode (a byte loop into it is ~40 % faster than chained
 * replaces, and than an array of codes turned into a string).
 */
let scratch = Buffer.allocUnsafe(4096);

export function scratchFor(length: number): Buffer {
  if (scratch.length < length) scratch = Buffer.allocUnsafe(Math.max(length, 2 * scratch.length));
  return scratch;
}
