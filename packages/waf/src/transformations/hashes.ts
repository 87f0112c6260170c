/**
 * Hashes: sha1, md5.
 */
import { hash } from 'node:crypto';

/** SHA-1 message schedule (sha1Short's scratch). */
const SHA1_W = new Int32Array(80);

/**
 * SHA-1 of a binary string, as a binary string of 20 bytes. Hand-written for short inputs (the
 * CRS hashes every request's User-Agent, 901318): inside a request, a call into node:crypto and
 * the Buffer it needs cost about twice this loop (measured in the engine, not in isolation);
 * longer inputs go to node:crypto.
 */
export function sha1(s: string): string {
  if (s.length > 1024) return hash('sha1', Buffer.from(s, 'latin1'), 'latin1' as 'hex');
  return sha1Short(s);
}

function sha1Short(s: string): string {
  const n = s.length;
  const W = SHA1_W;
  // the message, 0x80, zeros and the bit length in 64-byte blocks
  const blocks = ((n + 8) >> 6) + 1;
  let h0 = 0x67452301;
  let h1 = 0xefcdab89 | 0;
  let h2 = 0x98badcfe | 0;
  let h3 = 0x10325476;
  let h4 = 0xc3d2e1f0 | 0;
  for (let b = 0; b < blocks; b++) {
    const base = b << 6;
    for (let i = 0; i < 16; i++) {
      let word = 0;
      for (let k = 0; k < 4; k++) {
        const p = base + (i << 2) + k;
        word = (word << 8) | (p < n ? s.charCodeAt(p) & 0xff : p === n ? 0x80 : 0);
      }
      W[i] = word;
    }
    if (b === blocks - 1) {
      W[14] = Math.floor(n / 0x20000000); // the high word of n * 8
      W[15] = (n * 8) | 0;
    }
    for (let i = 16; i < 80; i++) {
      const x = W[i - 3]! ^ W[i - 8]! ^ W[i - 14]! ^ W[i - 16]!;
      W[i] = (x << 1) | (x >>> 31);
    }
    let a = h0;
    let bb = h1;
    let c = h2;
    let d = h3;
    let e = h4;
    for (let i = 0; i < 80; i++) {
      let f: number;
      let k: number;
      if (i < 20) {
        f = (bb & c) | (~bb & d);
        k = 0x5a827999;
      } else if (i < 40) {
        f = bb ^ c ^ d;
        k = 0x6ed9eba1;
      } else if (i < 60) {
        f = (bb & c) | (bb & d) | (c & d);
        k = 0x8f1bbcdc | 0;
      } else {
        f = bb ^ c ^ d;
        k = 0xca62c1d6 | 0;
      }
      const t = (((a << 5) | (a >>> 27)) + f + e + k + W[i]!) | 0;
      e = d;
      d = c;
      c = (bb << 30) | (bb >>> 2);
      bb = a;
      a = t;
    }
    h0 = (h0 + a) | 0;
    h1 = (h1 + bb) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
  }
  return wordBytes(h0) + wordBytes(h1) + wordBytes(h2) + wordBytes(h3) + wordBytes(h4);
}

function wordBytes(h: number): string {
  return String.fromCharCode((h >>> 24) & 0xff, (h >>> 16) & 0xff, (h >>> 8) & 0xff, h & 0xff);
}

export function md5(s: string): string {
  return hash('md5', Buffer.from(s, 'latin1'), 'latin1' as 'hex');
}
