/** What operators and client authors read: the OpenAPI document, its docs page, health and metrics. */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi, request } from '../support/api-client.ts';

describe('operations endpoints', () => {
  let tps: Tps;
  before(async () => {
    tps = await startTps();
  });
  after(() => tps.stop());

  it('serves an OpenAPI 3.1 document generated from the validating schemas', async () => {
    const answer = await request(`${tps.url}/openapi.json`);
    assert.equal(answer.status, 200);
    const document = answer.body;
    assert.equal(document.openapi, '3.1.0');
    for (const path of [
      '/oauth/token',
      '/api/v1/traffic-mgmt/accounts/{tenantId}/ips',
      '/api/v2/traffic-mgmt/traffic-configs',
      '/api/v2/traffic-mgmt/traffic-configs/{id}',
      '/api/v2/traffic-mgmt/certificates/pem',
      '/api/v2/traffic-mgmt/certificates/lets-encrypt',
      '/api/v2/traffic-mgmt/ca-certificates',
      '/api/v2/insight/http-security-events',
    ]) {
      assert.ok(document.paths[path], `${path} is documented`);
    }
    const create = document.paths['/api/v2/traffic-mgmt/traffic-configs'].post;
    const schema = create.requestBody.content['application/vnd.api+json'].schema;
    const [http] = schema.properties.data.oneOf;
    // The very numbers the validator enforces.
    assert.equal(http.properties.attributes.properties.waf.properties.paranoiaLevel.maximum, 4);
    assert.equal(http.properties.attributes.properties.frontend.properties.port.maximum, 65535);
    assert.deepEqual(schema.properties.data.discriminator, { propertyName: 'type' });
    assert.deepEqual(create.security, [{ bearer: [] }]);
  });

  it('serves a browsable docs page', async () => {
    const response = await fetch(`${tps.url}/docs/`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /text\/html/);
    assert.match(await response.text(), /swagger/i);
  });

  it("answers health checks and Prometheus metrics on the operators' listener only", async () => {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    await api.get('/api/v2/traffic-mgmt/traffic-configs');
    assert.notEqual(new URL(tps.metricsUrl).port, new URL(tps.url).port);
    const health = await request(`${tps.metricsUrl}/healthz`);
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'ok');
    for (const path of ['/metrics', '/healthz']) {
      assert.equal((await fetch(`${tps.url}${path}`)).status, 404, `the public API listener does not answer ${path}`);
    }
    const metrics = await fetch(`${tps.metricsUrl}/metrics`);
    assert.equal(metrics.status, 200);
    const text = await metrics.text();
    assert.match(text, /tps_api_requests_total\{method="GET",route="\/api\/v2\/traffic-mgmt\/traffic-configs",status="200"\} 1/);
    assert.match(text, /tps_process_resident_memory_bytes/);
  });
});
