import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
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

describe('settings: insight under a flood', () => {
  it('keeps 30 days, 1 GiB, half of it per tenant and 10 whole events per group and minute by default', () => {
    const settings = load({});
    assert.equal(settings.insightRetentionDays, 30);
    assert.equal(settings.insightMaxBytes, 1024 ** 3);
    assert.equal(settings.insightTenantSharePercent, 50);
    assert.equal(settings.insightWholeEventsPerMinute, 10);
  });

  it('reads bytes plain or with a k, m or g suffix', () => {
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '5000000' }).insightMaxBytes, 5_000_000);
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '512m' }).insightMaxBytes, 512 * 1024 ** 2);
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '20G' }).insightMaxBytes, 20 * 1024 ** 3);
    assert.equal(load({ TPS_INSIGHT_MAX_BYTES: '2048k' }).insightMaxBytes, 2 * 1024 ** 2);
  });

  it('stops at start on a bad value, naming the variable', () => {
    assert.throws(() => load({ TPS_INSIGHT_RETENTION_DAYS: '0' }), /TPS_INSIGHT_RETENTION_DAYS: must be an integer from 1/);
    assert.throws(() => load({ TPS_INSIGHT_MAX_BYTES: '1.5g' }), /TPS_INSIGHT_MAX_BYTES: must be a number of bytes/);
    assert.throws(() => load({ TPS_INSIGHT_MAX_BYTES: '100' }), /TPS_INSIGHT_MAX_BYTES: .*at least 1048576/);
    assert.throws(() => load({ TPS_INSIGHT_TENANT_SHARE_PERCENT: '101' }), /TPS_INSIGHT_TENANT_SHARE_PERCENT: must be an integer from 1 to 100/);
    assert.throws(() => load({ TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE: 'all' }), /TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE: must be an integer/);
  });
});
