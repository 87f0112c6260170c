/**
 * The signed tokens of the challenge: the challenge itself (in the page) and the clearance cookie
 * (after a solution). Both are stateless: the proxy keeps nothing per client, and any worker of any
 * node that has the same secret can check them.
 *
 * Keys rotate: the key of a period is HMAC(secret, period number), the period being at least the
 * clearance lifetime, and the current and previous period's keys are accepted. So a cookie never
 * outlives two keys, and nodes agree without exchanging anything.
 *
 * Both are bound to the proxy and to the client's network: its IPv4 /24 or IPv6 /64. A cookie
 * copied to a client elsewhere, or presented to another proxy, does not verify. A /24 rather than
 * the exact address because a browser behind a carrier's NAT pool changes address within it, and
 * every request from it would otherwise be challenged again.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { isIPv4 } from 'node:net';
import { sourceKey } from '../../../net/source-key.ts';

export const CLEARANCE_COOKIE = 'tps_clearance';
/** How long a challenge page's challenge may be solved. */
export const CHALLENGE_TTL_SECONDS = 300;
const MIN_ROTATION_SECONDS = 3600;
const MAC_CHARS = 43; // base64url of 32 bytes

/** The network a clearance is bound to: an IPv4 /24 or an IPv6 /64. */
export function clearanceNetwork(clientIp: string): string {
  // An IPv4 address (or an IPv4-mapped IPv6 one) comes back as dotted IPv4, an IPv6 one as its /64.
  const key = sourceKey(clientIp, 64);
  return isIPv4(key) ? `${key.slice(0, key.lastIndexOf('.'))}.0/24` : key;
}

export class ClearanceKeys {
  readonly #secret: Buffer;
  readonly #rotationSeconds: number;
  readonly clearanceSeconds: number;
  readonly #keys = new Map<number, Buffer>();

  constructor(secret: Buffer | undefined, clearanceSeconds: number) {
    this.#secret = secret ?? randomBytes(32);
    this.clearanceSeconds = clearanceSeconds;
    this.#rotationSeconds = Math.max(MIN_ROTATION_SECONDS, clearanceSeconds, CHALLENGE_TTL_SECONDS);
  }

  #period(seconds: number): number {
    return Math.floor(seconds / this.#rotationSeconds);
  }

  #key(period: number): Buffer {
    let key = this.#keys.get(period);
    if (key === undefined) {
      key = createHmac('sha256', this.#secret).update(`tps app-ddos key ${period}`).digest();
      if (this.#keys.size >= 4) this.#keys.clear();
      this.#keys.set(period, key);
    }
    return key;
  }

  #mac(period: number, text: string): string {
    return createHmac('sha256', this.#key(period)).update(text).digest('base64url');
  }

  /** True when `period` is the current or the previous one at `nowSeconds`. */
  #accepted(period: number, nowSeconds: number): boolean {
    const current = this.#period(nowSeconds);
    return period === current || period === current - 1;
  }

  /** A challenge for a client of `network` on `proxyId`: `issued.bits.nonce.mac`. */
  challenge(proxyId: string, network: string, bits: number, nowSeconds: number): string {
    const body = `${nowSeconds}.${bits}.${randomBytes(12).toString('base64url')}`;
    return `${body}.${this.#mac(this.#period(nowSeconds), `challenge\n${proxyId}\n${network}\n${body}`)}`;
  }

  /**
   * Checks a solution: the challenge is ours (for this proxy and network, not expired), and
   * SHA-256(`challenge:counter`) starts with the challenge's number of zero bits. One HMAC and one
   * hash, whatever the difficulty.
   */
  verifySolution(proxyId: string, network: string, challenge: string, counter: string, nowSeconds: number): boolean {
    if (challenge.length > 160 || !/^[0-9]{1,16}$/.test(counter)) return false;
    const parts = challenge.split('.');
    if (parts.length !== 4) return false;
    const [issuedText, bitsText, nonce, mac] = parts as [string, string, string, string];
    if (!/^[0-9]{1,12}$/.test(issuedText) || !/^[0-9]{1,2}$/.test(bitsText) || nonce.length === 0 || mac.length !== MAC_CHARS) return false;
    const issued = Number(issuedText);
    if (issued > nowSeconds + 5 || nowSeconds - issued > CHALLENGE_TTL_SECONDS) return false;
    const period = this.#period(issued);
    if (!this.#accepted(period, nowSeconds)) return false;
    const expected = this.#mac(period, `challenge\n${proxyId}\n${network}\n${issuedText}.${bitsText}.${nonce}`);
    if (!safeEqual(expected, mac)) return false;
    return leadingZeroBits(createHash('sha256').update(`${challenge}:${counter}`).digest()) >= Number(bitsText);
  }

  /** The clearance cookie's value: `expires.period.mac`. */
  clearance(proxyId: string, network: string, nowSeconds: number): string {
    const expires = nowSeconds + this.clearanceSeconds;
    const period = this.#period(nowSeconds);
    return `${expires}.${period}.${this.#mac(period, `clearance\n${proxyId}\n${network}\n${expires}`)}`;
  }

  /** A clearance cookie value that is ours, for this proxy and network, and not expired. */
  verifyClearance(proxyId: string, network: string, value: string, nowSeconds: number): boolean {
    if (value.length > 80) return false;
    const parts = value.split('.');
    if (parts.length !== 3) return false;
    const [expiresText, periodText, mac] = parts as [string, string, string];
    if (!/^[0-9]{1,12}$/.test(expiresText) || !/^[0-9]{1,12}$/.test(periodText) || mac.length !== MAC_CHARS) return false;
    const expires = Number(expiresText);
    // Issued in the future, or living longer than a clearance does: not one of ours.
    if (expires <= nowSeconds || expires > nowSeconds + this.clearanceSeconds + 5) return false;
    const period = Number(periodText);
    if (!this.#accepted(period, nowSeconds)) return false;
    return safeEqual(this.#mac(period, `clearance\n${proxyId}\n${network}\n${expiresText}`), mac);
  }
}

function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

export function leadingZeroBits(digest: Uint8Array): number {
  let bits = 0;
  for (const byte of digest) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

/** The value of cookie `name` in a Cookie header (several headers joined by "; "), else undefined. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined || header.length > 16_384) return undefined;
  let from = 0;
  while (from < header.length) {
    let end = header.indexOf(';', from);
    if (end === -1) end = header.length;
    const pair = header.slice(from, end).trim();
    const equals = pair.indexOf('=');
    if (equals !== -1 && pair.slice(0, equals).trim() === name) return pair.slice(equals + 1).trim();
    from = end + 1;
  }
  return undefined;
}
