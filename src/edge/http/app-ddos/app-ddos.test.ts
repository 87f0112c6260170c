import assert from 'node:assert/strict';
import { createHash, webcrypto } from 'node:crypto';
import { describe, it } from 'node:test';
import vm from 'node:vm';
import fc from 'fast-check';
import { CHALLENGE_PATH, CHALLENGE_SCRIPT } from './challenge-page.ts';
import { CLEARANCE_COOKIE, ClearanceKeys, clearanceNetwork, cookieValue, leadingZeroBits } from './clearance.ts';
import { AttackDetector, createAppDdosTables } from './detector.ts';
import { Exemptions, resolvedPath } from './exemptions.ts';
import { safeReturnPath } from './guard.ts';

const PROXY = '5b0f0f5e-3d7e-4a43-9c43-2f3f5d2b7f10';
const OTHER = '0c8a7d1e-8a57-4b64-8f5e-9b1c2d3e4f50';

function solve(challenge: string, bits: number): string {
  for (let n = 0; ; n++) {
    if (leadingZeroBits(createHash('sha256').update(`${challenge}:${n}`).digest()) >= bits) return String(n);
  }
}

/** Runs the page's script with a minimal DOM; resolves with the URL it navigates to. */
function runScript(challenge: string, bits: number, crypto: unknown): Promise<string> {
  return new Promise((resolve) => {
    const attributes: Record<string, string> = { 'data-challenge': challenge, 'data-bits': String(bits), 'data-return': '/a?b=c' };
    const element = { getAttribute: (name: string) => attributes[name] ?? null, textContent: '' };
    const window = { crypto, TextEncoder };
    const context = vm.createContext({
      window,
      crypto,
      TextEncoder,
      Uint8Array,
      Promise,
      setTimeout,
      encodeURIComponent,
      Math,
      document: { getElementById: () => element },
      location: { replace: resolve },
    });
    vm.runInContext(CHALLENGE_SCRIPT, context);
  });
}

describe('app-ddos clearance', () => {
  const keys = new ClearanceKeys(Buffer.alloc(32, 7), 1800);
  const now = 1_900_000_000;
  const network = clearanceNetwork('198.51.100.23');

  it('binds to the /24 and the /64', () => {
    assert.equal(network, '198.51.100.0/24');
    assert.equal(clearanceNetwork('::ffff:198.51.100.99'), '198.51.100.0/24');
    assert.equal(clearanceNetwork('2001:db8:1:2:3:4:5:6'), '2001:db8:1:2:0:0:0:0/64');
  });

  it('verifies a solution for its proxy and network only, before it expires', () => {
    const challenge = keys.challenge(PROXY, network, 8, now);
    const counter = solve(challenge, 8);
    assert.equal(keys.verifySolution(PROXY, network, challenge, counter, now + 10), true);
    assert.equal(keys.verifySolution(OTHER, network, challenge, counter, now + 10), false);
    assert.equal(keys.verifySolution(PROXY, '198.51.101.0/24', challenge, counter, now + 10), false);
    assert.equal(keys.verifySolution(PROXY, network, challenge, counter, now + 301), false);
    // A lower difficulty written into the challenge breaks its MAC.
    const [issued, , nonce, mac] = challenge.split('.');
    const easier = `${issued}.1.${nonce}.${mac}`;
    assert.equal(keys.verifySolution(PROXY, network, easier, solve(easier, 1), now), false);
    // Another secret's challenge.
    const other = new ClearanceKeys(Buffer.alloc(32, 8), 1800).challenge(PROXY, network, 1, now);
    assert.equal(keys.verifySolution(PROXY, network, other, solve(other, 1), now), false);
  });

  it('refuses a forged, expired, other-proxy or other-network clearance', () => {
    const value = keys.clearance(PROXY, network, now);
    assert.equal(keys.verifyClearance(PROXY, network, value, now + 60), true);
    assert.equal(keys.verifyClearance(PROXY, network, value, now + 1801), false);
    assert.equal(keys.verifyClearance(OTHER, network, value, now + 60), false);
    assert.equal(keys.verifyClearance(PROXY, '203.0.113.0/24', value, now + 60), false);
    const [expires, period] = value.split('.');
    assert.equal(keys.verifyClearance(PROXY, network, `${expires}.${period}.${'A'.repeat(43)}`, now + 60), false);
    assert.equal(keys.verifyClearance(PROXY, network, `${Number(expires) + 600}.${period}.${value.split('.')[2]}`, now + 60), false);
    // Issued near the end of a key period, checked in the next one: the previous key is still accepted.
    const late = keys.clearance(PROXY, network, 3600 * 1000 - 10);
    assert.equal(keys.verifyClearance(PROXY, network, late, 3600 * 1000 + 60), true);
  });

  it('reads its cookie among others', () => {
    assert.equal(cookieValue('a=1; tps_clearance=x.y.z; b=2', 'tps_clearance'), 'x.y.z');
    assert.equal(cookieValue('xtps_clearance=1', 'tps_clearance'), undefined);
    assert.equal(cookieValue(undefined, 'tps_clearance'), undefined);
  });

  for (const [name, crypto] of [
    ['with WebCrypto', webcrypto],
    ['without WebCrypto (plain HTTP)', undefined],
  ] as const) {
    it(`page script solves the challenge ${name}`, async () => {
      const challenge = keys.challenge(PROXY, network, 10, now);
      const target = new URL(await runScript(challenge, 10, crypto), 'http://site.test');
      assert.equal(target.pathname, CHALLENGE_PATH);
      assert.equal(target.searchParams.get('c'), challenge);
      assert.equal(target.searchParams.get('r'), '/a?b=c');
      assert.equal(keys.verifySolution(PROXY, network, challenge, target.searchParams.get('n')!, now + 5), true);
    });
  }
});

describe('app-ddos return path and exemptions', () => {
  it('sends back to this site only', () => {
    assert.equal(safeReturnPath('/shop?x=1'), '/shop?x=1');
    for (const bad of ['//evil.test/', '/\\evil.test', 'https://evil.test/', '/a\r\nSet-Cookie: x=1', `${CHALLENGE_PATH}?c=1`]) {
      assert.equal(safeReturnPath(bad), '/', bad);
    }
  });

  it('matches path prefixes after dot segments, never an encoded separator', () => {
    const exemptions = new Exemptions({
      pathPrefixes: ['/api/'],
      userAgents: ['Monitor/1'],
      sourceNetworks: ['10.1.0.0/16', '2001:db8::/32'],
    });
    assert.equal(exemptions.matches('192.0.2.1', '/api/v1/items?q=1', undefined), true);
    assert.equal(exemptions.matches('192.0.2.1', '/api/../admin', undefined), false);
    assert.equal(exemptions.matches('192.0.2.1', '/api/%2e%2e/admin', undefined), false);
    assert.equal(exemptions.matches('192.0.2.1', '/api/..%2fadmin', undefined), false);
    assert.equal(exemptions.matches('192.0.2.1', '/apix', undefined), false);
    assert.equal(exemptions.matches('192.0.2.1', '/', 'curl monitor/1.2'), true);
    assert.equal(exemptions.matches('10.1.200.3', '/', undefined), true);
    assert.equal(exemptions.matches('::ffff:10.1.2.3', '/', undefined), true);
    assert.equal(exemptions.matches('2001:db8:5::1', '/', undefined), true);
    assert.equal(exemptions.matches('10.2.0.1', '/', undefined), false);
    assert.equal(resolvedPath('/a/./b/../c?x'), '/a/c');
  });
});

describe('app-ddos detector', () => {
  const policy = { threshold: 20, factor: 4, minRate: 50, baselineHalfLifeSeconds: 60, quietSeconds: 3 };

  it('learns a normal rate, declares an attack over the trigger and ends it after the quiet seconds', () => {
    const detector = new AttackDetector(createAppDdosTables(64), policy);
    const start = 1_000_000_000_000;
    // 5 requests a second for a minute: normal.
    for (let s = 0; s < 60; s++) for (let i = 0; i < 5; i++) assert.equal(detector.count(start + s * 1000 + i).attackStart, 0);
    // 100 a second for 3 seconds: over the absolute threshold (20).
    let attackStart = 0;
    for (let s = 60; s < 63; s++) {
      for (let i = 0; i < 100; i++) attackStart = detector.count(start + s * 1000 + i).attackStart || attackStart;
    }
    // At the request that crossed the threshold (the 21st of the second), not at the second's end.
    assert.equal(attackStart, start + 60_020);
    assert.equal(detector.source('192.0.2.1', attackStart, start + 62_500, true, 2, 10_000).verdict, 'challenge');
    assert.equal(detector.source('192.0.2.1', attackStart, start + 62_500, true, 2, 10_000).verdict, 'challenge');
    assert.equal(detector.source('192.0.2.1', attackStart, start + 62_500, true, 2, 10_000).verdict, 'just-blocked');
    assert.equal(detector.source('192.0.2.1', attackStart, start + 62_600, false, 2, 10_000).verdict, 'blocked');
    detector.add(start + 62_500, 'challenged', true);
    assert.equal(detector.pass(start + 62_700, 1, true), 'passed');
    assert.equal(detector.pass(start + 62_800, 1, false), 'shed');
    // The flood stops: the ticks close the quiet seconds, and the report comes once.
    assert.equal(detector.tick(start + 64_000), undefined);
    const report = detector.tick(start + 70_000);
    assert.ok(report);
    assert.equal(report.startedAt, start + 60_020);
    assert.equal(report.endedAt, start + 63_000);
    assert.equal(report.peakRate, 100);
    assert.equal(report.requests, 300);
    assert.equal(report.challenged, 1);
    assert.equal(report.passed, 1);
    assert.equal(report.shed, 1);
    assert.equal(report.sources, 2);
    assert.equal(report.triggerRate, 20);
    assert.ok(report.baselineRate > 1 && report.baselineRate <= 5);
    assert.equal(detector.tick(start + 71_000), undefined);
  });

  it('without a threshold, the learned rate times the factor (never below the minimum) decides', () => {
    const detector = new AttackDetector(createAppDdosTables(64), { ...policy, threshold: undefined });
    const start = 2_000_000_000_000;
    for (let s = 0; s < 10; s++) for (let i = 0; i < 40; i++) assert.equal(detector.count(start + s * 1000 + i).attackStart, 0);
    for (let i = 0; i < 60; i++) detector.count(start + 10_000 + i);
    assert.ok(detector.count(start + 11_000).attackStart > 0);
  });
});

describe('app-ddos parsers of client input (properties)', () => {
  const keys = new ClearanceKeys(Buffer.alloc(32, 9), 1800);
  const now = 1_900_000_000;
  const network = '192.0.2.0/24';

  it('no string that the keys did not sign verifies as a clearance or a solution, and nothing throws', () => {
    const genuine = keys.clearance(PROXY, network, now);
    const challenge = keys.challenge(PROXY, network, 1, now);
    const text = fc.oneof(
      fc.string({ maxLength: 120 }),
      fc.stringMatching(/^[0-9]{1,12}\.[0-9]{1,12}\.[A-Za-z0-9_-]{40,46}$/),
      // Genuine values with one character changed.
      fc
        .tuple(fc.nat({ max: genuine.length - 1 }), fc.string({ minLength: 1, maxLength: 1 }))
        .map(([at, c]) => genuine.slice(0, at) + c + genuine.slice(at + 1)),
    );
    fc.assert(
      fc.property(text, (value) => {
        fc.pre(value !== genuine);
        assert.equal(keys.verifyClearance(PROXY, network, value, now + 1), false);
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(
        fc
          .tuple(fc.nat({ max: challenge.length - 1 }), fc.string({ minLength: 1, maxLength: 1 }))
          .map(([at, c]) => challenge.slice(0, at) + c + challenge.slice(at + 1)),
        fc.string({ maxLength: 20 }),
        (altered, counter) => {
          fc.pre(altered !== challenge);
          assert.equal(keys.verifySolution(PROXY, network, altered, counter, now + 1), false);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('the cookie reader finds a pair wherever it sits, and only an exact name', () => {
    const name = fc.stringMatching(/^[A-Za-z0-9_]{1,12}$/);
    const value = fc.stringMatching(/^[A-Za-z0-9._-]{0,20}$/);
    fc.assert(
      fc.property(fc.array(fc.tuple(name, value), { maxLength: 6 }), value, fc.nat({ max: 6 }), (pairs, mine, at) => {
        const others = pairs.filter(([n]) => n !== CLEARANCE_COOKIE);
        const all = [...others.slice(0, at), [CLEARANCE_COOKIE, mine] as const, ...others.slice(at)];
        const header = all.map(([n, v]) => `${n}=${v}`).join(fc.sample(fc.constantFrom('; ', ';', ' ;  '), 1)[0]);
        assert.equal(cookieValue(header, CLEARANCE_COOKIE), mine);
        assert.equal(cookieValue(others.map(([n, v]) => `${n}=${v}`).join('; '), CLEARANCE_COOKIE), undefined);
      }),
    );
  });
});
