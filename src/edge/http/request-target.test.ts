import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { type AmbiguousPathAction, canonicalPathPrefix, canonicalTarget, isUtf8, type RequestTargetSettings } from './request-target.ts';

const REFUSE: RequestTargetSettings = { ambiguousPath: 'REFUSE', mergeSlashes: true };
const NORMALIZE: RequestTargetSettings = { ambiguousPath: 'NORMALIZE', mergeSlashes: true };
const KEEP: RequestTargetSettings = { ambiguousPath: 'KEEP', mergeSlashes: true };

function target(raw: string, settings = REFUSE): string {
  const result = canonicalTarget(raw, settings);
  assert.ok(result.ok, `${raw} refused: ${result.ok ? '' : result.reason}`);
  return result.value.target;
}

function refusal(raw: string, settings = REFUSE): string {
  const result = canonicalTarget(raw, settings);
  assert.ok(!result.ok, `${raw} accepted as ${result.ok ? result.value.target : ''}`);
  return result.reason;
}

describe('request target: canonical form', () => {
  it('removes dot segments (RFC 3986 5.2.4), encoded ones too, never above the root', () => {
    assert.equal(target('/a/../b'), '/b');
    assert.equal(target('/a/./b'), '/a/b');
    assert.equal(target('/a/%2e%2E/b'), '/b');
    assert.equal(target('/a/.%2e/b'), '/b');
    assert.equal(target('/../../etc/passwd'), '/etc/passwd');
    assert.equal(target('/a/b/..'), '/a/');
    assert.equal(target('/a/.'), '/a/');
    assert.equal(target('/..'), '/');
    assert.equal(target('/'), '/');
  });

  it('decodes unreserved characters, upper-cases other escapes, escapes what a path may not hold', () => {
    assert.equal(target('/%61%62c'), '/abc');
    assert.equal(target('/a%3fb'), '/a%3Fb');
    assert.equal(target('/a b"<>'), '/a%20b%22%3C%3E');
    assert.equal(target('/caf\u00c3\u00a9'), '/caf%C3%A9');
    assert.equal(target('/caf%c3%a9'), '/caf%C3%A9');
    assert.equal(target('/a;x=1/b@c:d'), '/a;x=1/b@c:d');
  });

  it('takes a plain path as it is', () => {
    for (const path of ['/', '/index.html', '/a/b/c/', '/a.b/c..d/e.', "/x-y_z~!$&'()*+,=:@"]) assert.equal(target(path), path);
    assert.equal(target('/a/.hidden'), '/a/.hidden');
  });

  it('merges slashes by default, keeps them when told', () => {
    assert.equal(target('//a///b//'), '/a/b/');
    assert.equal(target('//a///b//', { ...REFUSE, mergeSlashes: false }), '//a///b//');
    assert.equal(target('//a/../b', { ...REFUSE, mergeSlashes: false }), '//b');
  });

  it('passes the query on as received and drops a fragment', () => {
    assert.equal(target('/a/../b?x=/../%2F&y'), '/b?x=/../%2F&y');
    assert.equal(target('/a#frag'), '/a');
    assert.equal(target('/a?q#frag'), '/a?q');
    assert.equal(target('?x=1'), '/?x=1', 'an empty path is /');
  });

  it('reads absolute-form targets as their path, with their authority', () => {
    const result = canonicalTarget('http://Example.COM:8080/a/../b?q');
    assert.ok(result.ok);
    assert.deepEqual(result.value, { path: '/b', target: '/b?q', authority: 'example.com:8080' });
    assert.equal(target('https://h'), '/');
    assert.equal(refusal('ftp://h/a'), 'MALFORMED_TARGET');
    assert.equal(refusal('http://user@h/a'), 'MALFORMED_TARGET');
    assert.equal(refusal('a/b'), 'MALFORMED_TARGET');
    assert.equal(target('*'), '*');
  });
});

describe('request target: ambiguous paths', () => {
  const cases: [raw: string, reason: string, normalized: string | null, kept: string][] = [
    ['/a%2fb', 'ESCAPED_SLASH', '/a/b', '/a%2Fb'],
    ['/a%5Cb', 'ESCAPED_SLASH', '/a/b', '/a%5Cb'],
    ['/a\\b', 'BACKSLASH', '/a/b', '/a%5Cb'],
    ['/a/%2E%2e%2fb', 'ESCAPED_SLASH', '/b', '/a/..%2Fb'],
    ['/public/..;/admin', 'DOT_SEGMENT_PARAMETERS', '/admin', '/public/..;/admin'],
    ['/public/.;x/admin', 'DOT_SEGMENT_PARAMETERS', '/public/admin', '/public/.;x/admin'],
    ['/public/%2e%2e;/admin', 'DOT_SEGMENT_PARAMETERS', '/admin', '/public/..;/admin'],
    ['/public/..%3b/admin', 'DOT_SEGMENT_PARAMETERS', '/admin', '/public/..%3B/admin'],
    ['/a%00b', 'NUL', null, '/a%00b'],
    ['/a/%c0%ae%c0%ae/b', 'INVALID_UTF8', null, '/a/%C0%AE%C0%AE/b'],
    ['/a\u00ff', 'INVALID_UTF8', null, '/a%FF'],
    ['/a%zz', 'BAD_ESCAPE', null, '/a%25zz'],
    ['/a%4', 'BAD_ESCAPE', null, '/a%254'],
  ];
  for (const [raw, reason, normalized, kept] of cases) {
    it(`${raw}: refused (${reason}), normalised to ${normalized ?? 'a refusal'}, kept as ${kept}`, () => {
      assert.equal(refusal(raw), reason);
      if (normalized === null) assert.equal(refusal(raw, NORMALIZE), reason);
      else assert.equal(target(raw, NORMALIZE), normalized);
      assert.equal(target(raw, KEEP), kept);
    });
  }

  it('leaves path parameters on ordinary segments alone: /a;x/../b is /b for every server', () => {
    assert.equal(target('/a;x/../b'), '/b');
    assert.equal(target('/a;jsessionid=1/b'), '/a;jsessionid=1/b');
  });
});

describe('request target: exclusion prefixes', () => {
  it('are in the canonical form, without the trailing slash', () => {
    assert.equal(canonicalPathPrefix('/api/', true), '/api');
    assert.equal(canonicalPathPrefix('/%61pi/./v1', true), '/api/v1');
    assert.equal(canonicalPathPrefix('/', true), '');
    assert.equal(canonicalPathPrefix('/caf%c3%a9', true), '/caf%C3%A9');
  });
});

describe('request target: UTF-8', () => {
  it('agrees with TextDecoder in fatal mode on random bytes', () => {
    const decoder = new TextDecoder('utf-8', { fatal: true });
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 12 }), (bytes) => {
        let valid = true;
        try {
          decoder.decode(new Uint8Array(bytes));
        } catch {
          valid = false;
        }
        assert.equal(isUtf8(bytes), valid);
      }),
      { numRuns: 20_000 },
    );
  });
});

/** Pieces path-confusion attacks are made of. */
const PIECE = fc.constantFrom(
  'a',
  'b',
  '.',
  '..',
  '/',
  '//',
  '%2e',
  '%2E',
  '%2f',
  '%5c',
  '\\',
  ';',
  '%3b',
  ';x',
  '%00',
  '%c0%ae',
  '%c3%a9',
  '%',
  '%4',
  '%41',
  '%7e',
  '~',
  '?',
  '#',
  ' ',
  '\u00e9',
  ':',
  '@',
  '%25',
);
const RAW_PATH = fc.array(PIECE, { maxLength: 14 }).map((pieces) => `/${pieces.join('')}`);
const SETTINGS = fc.record({
  ambiguousPath: fc.constantFrom<AmbiguousPathAction>('REFUSE', 'NORMALIZE', 'KEEP'),
  mergeSlashes: fc.boolean(),
});

describe('request target: properties on random targets', () => {
  it('the canonical target is a fixed point: read again, it is the same', () => {
    fc.assert(
      fc.property(RAW_PATH, SETTINGS, (raw, settings) => {
        const first = canonicalTarget(raw, settings);
        if (!first.ok) return;
        const again = canonicalTarget(first.value.target, settings);
        assert.ok(again.ok, `${first.value.target} refused on the second reading`);
        assert.equal(again.value.target, first.value.target);
      }),
      { numRuns: 20_000 },
    );
  });

  it('a WHATWG URL parser reads the canonical path as it is (nothing left to resolve or decode)', () => {
    fc.assert(
      fc.property(RAW_PATH, SETTINGS, (raw, settings) => {
        const result = canonicalTarget(raw, settings);
        if (!result.ok) return;
        const path = result.value.path;
        assert.equal(new URL(`http://h${path}`).pathname, path, `from ${raw}`);
        assert.ok(/^\/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-F]{2})*$/.test(path), path);
        assert.ok(!/(?:^|\/)\.\.?(?:\/|$)/.test(path), `dot segment left in ${path}`);
        if (settings.mergeSlashes) assert.ok(!path.includes('//'), path);
      }),
      { numRuns: 20_000 },
    );
  });

  it('REFUSE lets nothing ambiguous through: no encoded slash, NUL, or dot segment with parameters', () => {
    fc.assert(
      fc.property(RAW_PATH, fc.boolean(), (raw, mergeSlashes) => {
        const result = canonicalTarget(raw, { ambiguousPath: 'REFUSE', mergeSlashes });
        if (!result.ok) return;
        const path = result.value.path;
        assert.ok(!/%2F|%5C|%00|%C0|\\/i.test(path), path);
        for (const segment of path.split('/')) {
          const decoded = decodeURIComponent(segment);
          const beforeParameters = decoded.split(';')[0];
          assert.ok(!(decoded.includes(';') && (beforeParameters === '.' || beforeParameters === '..')), path);
        }
      }),
      { numRuns: 20_000 },
    );
  });

  it('NORMALIZE reads slashes, backslashes and dot segments as a browser (WHATWG) does', () => {
    const simple = fc
      .array(fc.constantFrom('a', 'b', '.', '..', '/', '%2e', '%2E', '\\', '%2f', '%5C'), { maxLength: 12 })
      .map((pieces) => `/${pieces.join('')}`);
    fc.assert(
      fc.property(simple, (raw) => {
        const result = canonicalTarget(raw, { ambiguousPath: 'NORMALIZE', mergeSlashes: false });
        assert.ok(result.ok);
        // WHATWG leaves %2f and %2e (outside dot segments) escaped; ours are separators and dots.
        const whatwg = new URL(`http://h${raw.replace(/%2f|%5c/gi, '/')}`).pathname.replace(/%2e/gi, '.');
        assert.equal(result.value.path, whatwg, `from ${raw}`);
      }),
      { numRuns: 20_000 },
    );
  });
});
