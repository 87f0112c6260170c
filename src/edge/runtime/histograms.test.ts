import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { HistogramBatch, MergedHistogram } from './histograms.ts';

describe('edge histograms', () => {
  it("adds the workers' bucket counts into one Prometheus histogram", async () => {
    const registry = new Registry();
    const merged = new MergedHistogram('tps_edge_http_request_duration_seconds', registry);
    const worker1 = new HistogramBatch();
    const worker2 = new HistogramBatch();
    worker1.observe('tps_edge_http_request_duration_seconds', { proxy: 'a' }, 0.003);
    worker1.observe('tps_edge_http_request_duration_seconds', { proxy: 'a' }, 0.2);
    worker2.observe('tps_edge_http_request_duration_seconds', { proxy: 'a' }, 120);
    worker2.observe('tps_edge_http_request_duration_seconds', { proxy: 'b' }, 0.001);
    worker2.observe('tps_edge_http_request_duration_seconds', { proxy: 'b' }, Number.NaN);
    for (const increment of [...worker1.take(), ...worker2.take()]) merged.add(increment);
    assert.equal(worker1.size, 0);
    const text = await registry.metrics();
    assert.match(text, /# TYPE tps_edge_http_request_duration_seconds histogram/);
    assert.match(text, /tps_edge_http_request_duration_seconds_bucket\{proxy="a",le="0.0025"\} 0\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_bucket\{proxy="a",le="0.005"\} 1\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_bucket\{proxy="a",le="0.25"\} 2\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_bucket\{proxy="a",le="60"\} 2\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_bucket\{proxy="a",le="\+Inf"\} 3\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_sum\{proxy="a"\} 120.203\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_count\{proxy="a"\} 3\n/);
    assert.match(text, /tps_edge_http_request_duration_seconds_bucket\{proxy="b",le="0.001"\} 1\n/);
    assert.equal(merged.countOf({ proxy: 'b' }), 1);
  });
});
