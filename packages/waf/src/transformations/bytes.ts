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
export function fromCodes(codes: number[] | Uint8Array | Uint16Array, length: number = codes.length): string {
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

/**
 * Where a decoder that never lengthens its input writes its result: the byte scratch, or, for an
 * input with characters past 0xFF (values are binary strings, so rarely), wide codes.
 */
export type CodeSink = Uint8Array | Uint16Array;

/**
 * A decoder writing `s`'s result into `out` from 0: its length, or its length's complement (`~o`,
 * negative) when it copied a character past 0xFF, which a byte sink cannot hold.
 */
export type SinkDecoder = (s: string, out: CodeSink) => number;

let wideScratch = new Uint16Array(1024);

/**
 * Runs `decode` into the byte scratch and reads it back as latin1; an input with a character past
 * 0xFF is decoded again into wide codes. One decoder for both: the byte path is the fast one (no
 * array of codes grown by push, most of a form request's garbage once), the wide one keeps
 * characters as they are.
 */
export function decodeThroughScratch(s: string, decode: SinkDecoder): string {
  const bytes = scratchFor(s.length);
  const length = decode(s, bytes);
  if (length >= 0) return bytes.toString('latin1', 0, length);
  if (wideScratch.length < s.length) wideScratch = new Uint16Array(Math.max(s.length, 2 * wideScratch.length));
  const wide = wideScratch;
  return fromCodes(wide, ~decode(s, wide));
}
