import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { loadSettings, SettingsError } from './settings.ts';

/** Settings from these variables only (never the environment of the test run). */
const load = (env: Record<string, string>, flags: Parameters<typeof loadSettings>[0] = {}) => loadSettings(flags, { TPS_ACME_DIRECTORY_URL: 'off', ...env });

describe('settings: load balancers in front of the edge', () => {
  it('trusts nobody and reads no PROXY header by default', () => {
    const settings = load({});
    assert.deepEqual(settings.trustedProxies, []);
    assert.equal(settings.listenerProxyProtocol, 'off');
  });

  it('reads a comma list of IPv4/IPv6 CIDRs and addresses; a flag overrides the variable', () => {
    const settings = load({ TPS_TRUSTED_PROXIES: ' 10.0.0.0/8, 2001:db8::/32 ,192.0.2.7,', TPS_LISTENER_PROXY_PROTOCOL: 'optional' });
    assert.deepEqual(settings.trustedProxies, ['10.0.0.0/8', '2001:db8::/32', '192.0.2.7']);
    assert.equal(settings.listenerProxyProtocol, 'optional');
    const flagged = load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8' }, { trustedProxies: '172.16.0.0/12', listenerProxyProtocol: 'required' });
    assert.deepEqual(flagged.trustedProxies, ['172.16.0.0/12']);
    assert.equal(flagged.listenerProxyProtocol, 'required');
  });

  it('stops at start on an invalid CIDR, naming the setting and the entry', () => {
    assert.throws(
      () => load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8,10.0.0.0/33,lb.example.com' }),
      (error: Error) => error instanceof SettingsError && /TPS_TRUSTED_PROXIES \(--trusted-proxies\): .*"10\.0\.0\.0\/33", "lb\.example\.com"/.test(error.message),
    );
  });

  it('refuses an unknown PROXY protocol mode, and a mode without trusted networks', () => {
    assert.throws(() => load({ TPS_TRUSTED_PROXIES: '10.0.0.0/8', TPS_LISTENER_PROXY_PROTOCOL: 'on' }), /TPS_LISTENER_PROXY_PROTOCOL .*off, optional or required/);
    assert.throws(() => load({ TPS_LISTENER_PROXY_PROTOCOL: 'required' }), /TPS_LISTENER_PROXY_PROTOCOL .*needs TPS_TRUSTED_PROXIES/);
  });
});

describe('settings: errors', () => {
  it('name the environment variable, and the flag only where the CLI has one', () => {
    assert.throws(() => load({ TPS_WAF_THREADS: 'many' }), (error: Error) => error instanceof SettingsError && /TPS_WAF_THREADS: must be an integer/.test(error.message));
    assert.throws(() => load({ TPS_LOCATION: 'frankfurt' }), (error: Error) => error instanceof SettingsError && /TPS_LOCATION \(--location\): /.test(error.message));
  });
});

describe("settings: the service's own listeners", () => {
  it('serves /metrics and /healthz on 127.0.0.1:9464 unless told otherwise', () => {
    assert.deepEqual(load({}).metricsListen, { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(load({ TPS_METRICS_LISTEN: '[::1]:9000' }).metricsListen, { host: '::1', port: 9000 });
  });

  it('refuses an API or metrics listener on a front-end IP or on every address, naming the variable', () => {
    const frontend = { TPS_FRONTEND_IPS: '127.0.0.2,::1' };
    assert.throws(() => load({ ...frontend, TPS_API_LISTEN: '127.0.0.2:8080' }), /TPS_API_LISTEN .*front-end IP/);
    assert.throws(() => load({ ...frontend, TPS_METRICS_LISTEN: '[::1]:9464' }), /TPS_METRICS_LISTEN .*front-end IP/);
    assert.throws(() => load({ TPS_API_LISTEN: '0.0.0.0:8080' }), /TPS_API_LISTEN .*every address/);
    assert.throws(() => load({ TPS_METRICS_LISTEN: '[::]:9464' }), /TPS_METRICS_LISTEN .*every address/);
    assert.throws(() => load({ TPS_METRICS_LISTEN: 'localhost:9464' }), /TPS_METRICS_LISTEN .*ip:port/);
  });
});

describe('settings: the WAF', () => {
  it('follows ModSecurity-recommended body limits by default: 128 KiB inspected, longer refused, uploads up to 1 MiB', () => {
    const settings = load({});
    assert.equal(settings.wafRequestBodyLimit, 131072);
    assert.equal(settings.wafBodyLimitAction, 'REJECT');
    assert.equal(settings.wafMultipartBodyLimit, 1024 * 1024);
    assert.equal(load({ TPS_WAF_BODY_LIMIT_ACTION: 'PROCESS_PARTIAL' }).wafBodyLimitAction, 'PROCESS_PARTIAL');
    assert.throws(() => load({ TPS_WAF_BODY_LIMIT_ACTION: 'partial' }), /TPS_WAF_BODY_LIMIT_ACTION: must be PROCESS_PARTIAL or REJECT/);
    assert.throws(() => load({ TPS_WAF_MULTIPART_BODY_LIMIT: '-1' }), /TPS_WAF_MULTIPART_BODY_LIMIT: must be an integer/);
  });

  it('sizes the WAF threads from the cores shared out among the edge workers, and its queue per thread', () => {
    const cores = os.availableParallelism();
    assert.equal(load({ TPS_EDGE_WORKERS: '1' }).wafThreads, cores);
    assert.equal(load({ TPS_EDGE_WORKERS: String(cores) }).wafThreads, 1);
    assert.equal(load({ TPS_EDGE_WORKERS: String(cores * 4) }).wafThreads, 1);
    assert.equal(load({ TPS_WAF_THREADS: '3' }).wafThreads, 3);
    assert.equal(load({}).wafQueueLength, 64);
    assert.equal(load({ TPS_WAF_QUEUE_LENGTH: '0' }).wafQueueLength, 0);
    assert.throws(() => load({ TPS_WAF_QUEUE_LENGTH: 'lots' }), /TPS_WAF_QUEUE_LENGTH: must be an integer/);
  });
});
