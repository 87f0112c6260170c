/** The engine an edge worker starts (TPS_WAF_ENGINE): ours always, ModSecurity from its optional package, with a clear error without it. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startWafEngine } from './engines.ts';

const get = {
  clientIp: '203.0.113.9',
  clientPort: 50000,
  serverIp: '198.51.100.1',
  serverPort: 80,
  method: 'GET',
  uri: "/?id=1'%20or%20'1'%3D'1",
  httpVersion: '1.1',
  headers: [['Host', 'example.com']] as const,
};

test('compiled: our engine, in the worker pool', { timeout: 60_000 }, async () => {
  const engine = await startWafEngine('compiled', { workers: 1 });
  try {
    assert.equal(engine.name, 'compiled');
    const verdict = await engine.inspectRequest(get, { paranoiaLevel: 1 });
    assert.equal(verdict.interrupt?.status, 403);
  } finally {
    await engine.close();
  }
});

test('modsecurity without its package: the start fails saying what to install', async () => {
  const absent = () =>
    Promise.reject(
      Object.assign(new Error("Cannot find package '@tps/waf-modsecurity' imported from engines.ts"), { code: 'ERR_MODULE_NOT_FOUND' }),
    );
  await assert.rejects(startWafEngine('modsecurity', { workers: 1 }, absent), (error: Error) => {
    assert.match(
      error.message,
      /^TPS_WAF_ENGINE=modsecurity needs the optional package @tps\/waf-modsecurity and its addon \(bash scripts\/setup\.sh --modsecurity\): Cannot find package/,
    );
    return true;
  });
});
