import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WafSettingsError } from './engine.ts';
import { normalizedPath, pathUnderPrefix, removalsFor, validateExclusion } from './exclusions.ts';

test('normalizedPath: what the origin would serve', () => {
  assert.equal(normalizedPath('/'), '/');
  assert.equal(normalizedPath('/api/users?id=1#x'), '/api/users');
  assert.equal(normalizedPath('/api/../admin'), '/admin');
  assert.equal(normalizedPath('/api%2F..%2Fadmin'), '/admin');
  assert.equal(normalizedPath('//api///./v1/'), '/api/v1/');
  assert.equal(normalizedPath('/api\\..\\admin'), '/admin');
  assert.equal(normalizedPath('http://example.com/api/x?y'), '/api/x');
  assert.equal(normalizedPath('/../../etc/passwd'), '/etc/passwd');
});

test('removalsFor: path scope, rule ids, header name case', () => {
  const request = {
    uri: '/api/search?q=1',
    headers: [
      ['user-agent', 'x'],
      ['Host', 'h'],
    ] as [string, string][],
  };
  assert.deepEqual(removalsFor(request, undefined), []);
  assert.deepEqual(
    removalsFor(request, [
      { ruleIds: [942100, 942200] },
      { ruleIds: [941100], pathPrefix: '/api/', target: 'ARGS:q' },
      { ruleIds: [920100], pathPrefix: '/admin' },
      { ruleIds: [913100], target: 'REQUEST_HEADERS:User-Agent' },
    ]),
    [
      { ruleId: 942100 },
      { ruleId: 942200 },
      { ruleId: 941100, target: 'ARGS:q' },
      { ruleId: 913100, target: 'REQUEST_HEADERS:User-Agent' },
      { ruleId: 913100, target: 'REQUEST_HEADERS:user-agent' },
    ],
  );
  assert.deepEqual(removalsFor({ uri: '/api/../admin', headers: [] }, [{ ruleIds: [1], pathPrefix: '/api/' }]), []);
});

test('validateExclusion refuses what the engine cannot apply', () => {
  validateExclusion({ ruleIds: [942100], pathPrefix: '/a', target: 'REQUEST_COOKIES:session' });
  validateExclusion({ ruleIds: [942100], target: 'ARGS' });
  for (const bad of [
    { ruleIds: [] },
    { ruleIds: [0] },
    { ruleIds: [1.5] },
    { ruleIds: [1], pathPrefix: 'api' },
    { ruleIds: [1], target: 'TX:score' },
    { ruleIds: [1], target: 'ARGS: q' },
  ]) {
    assert.throws(() => validateExclusion(bad), WafSettingsError, JSON.stringify(bad));
  }
});

test('pathPrefix matches whole path segments', () => {
  for (const prefix of ['/api', '/api/', '/api//', '/./api']) {
    assert.equal(pathUnderPrefix('/api', prefix), true, `${prefix} covers /api`);
    assert.equal(pathUnderPrefix('/api/', prefix), true, `${prefix} covers /api/`);
    assert.equal(pathUnderPrefix('/api/x', prefix), true, `${prefix} covers /api/x`);
    assert.equal(pathUnderPrefix('/api/x/y', prefix), true, `${prefix} covers /api/x/y`);
    assert.equal(pathUnderPrefix('/api-admin', prefix), false, `${prefix} does not cover /api-admin`);
    assert.equal(pathUnderPrefix('/apix/y', prefix), false, `${prefix} does not cover /apix/y`);
    assert.equal(pathUnderPrefix('/ap', prefix), false, `${prefix} does not cover /ap`);
    assert.equal(pathUnderPrefix('/', prefix), false, `${prefix} does not cover /`);
  }
  assert.equal(pathUnderPrefix('/anything/at/all', '/'), true, '/ covers every path');
  assert.equal(pathUnderPrefix('/api/v1/users', '/api/v1'), true);
  assert.equal(pathUnderPrefix('/api/v10', '/api/v1'), false);

  // Through removalsFor, as both engines call it, on the request target as the client sent it.
  const exclusions = [{ ruleIds: [942100], pathPrefix: '/api' }];
  const at = (uri: string) => removalsFor({ uri, headers: [] }, exclusions).length > 0;
  assert.equal(at('/api'), true);
  assert.equal(at('/api?q=1'), true);
  assert.equal(at('/api/search?q=1'), true);
  assert.equal(at('/api-admin/delete?q=1'), false);
  assert.equal(at('/api%2Dadmin'), false);
  assert.equal(at('/apiary'), false);
  assert.equal(at('/api/../api-admin'), false);
});

test("with the proxy's canonical path, the prefix is matched on it, not on the target as received", () => {
  const exclusions = [{ ruleIds: [942100], pathPrefix: '/public' }];
  // Tomcat serves /public/..;/admin as /admin: the proxy forwards /admin, or refuses the target.
  assert.deepEqual(removalsFor({ uri: '/public/..;/admin', path: '/admin', headers: [] }, exclusions), []);
  assert.deepEqual(removalsFor({ uri: '/%70ublic/x', path: '/public/x', headers: [] }, exclusions), [{ ruleId: 942100 }]);
  assert.deepEqual(removalsFor({ uri: '/public;x/y', path: '/public;x/y', headers: [] }, exclusions), []);
});
