import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BASE_FD_RESERVE, EdgeBudgetError, FALLBACK_EDGE_MAX_CONNECTIONS, edgeBudget, parseOpenFilesLimit } from './fd-budget.ts';

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max open files            20000                40000                files     
Max locked memory         8388608              8388608              bytes     
`;

describe('the edge connection budget', () => {
  it('reads the soft limit of open files from /proc/self/limits', () => {
    assert.equal(parseOpenFilesLimit(LIMITS), 20000);
    assert.equal(parseOpenFilesLimit(LIMITS.replace('20000  ', 'unlimited')), Number.POSITIVE_INFINITY);
    assert.equal(parseOpenFilesLimit('nothing here'), undefined);
  });

  it('gives the edge half of what the reserve leaves: one descriptor for the client, one for the origin', () => {
    const budget = edgeBudget({ configured: undefined, fdLimit: 20000, apiMaxConnections: 1024, metricsMaxConnections: 64 });
    assert.equal(budget.reserve, BASE_FD_RESERVE + 1024 + 64);
    assert.equal(budget.maxConnections, Math.floor((20000 - budget.reserve) / 2));
    assert.equal(budget.source, 'derived');
    // An edge-only node keeps no room for an API listener.
    const edgeOnly = edgeBudget({ configured: undefined, fdLimit: 20000, apiMaxConnections: 0, metricsMaxConnections: 64 });
    assert.equal(edgeOnly.maxConnections, Math.floor((20000 - BASE_FD_RESERVE - 64) / 2));
  });

  it('takes the setting when the limit holds it, and stops the start when it does not', () => {
    const options = { fdLimit: 20000, apiMaxConnections: 1024, metricsMaxConnections: 64 };
    assert.deepEqual(edgeBudget({ ...options, configured: 5000 }).maxConnections, 5000);
    assert.throws(() => edgeBudget({ ...options, configured: 9000 }), EdgeBudgetError);
    assert.throws(() => edgeBudget({ ...options, configured: undefined, fdLimit: 2000 }), /raise it/);
  });

  it('falls back where the limit cannot be read, and bounds an unlimited one', () => {
    const unknown = edgeBudget({ configured: undefined, fdLimit: undefined, apiMaxConnections: 1024, metricsMaxConnections: 64 });
    assert.deepEqual([unknown.maxConnections, unknown.source], [FALLBACK_EDGE_MAX_CONNECTIONS, 'fallback']);
    const unlimited = edgeBudget({
      configured: undefined,
      fdLimit: Number.POSITIVE_INFINITY,
      apiMaxConnections: 0,
      metricsMaxConnections: 64,
    });
    assert.equal(unlimited.maxConnections, 1_048_576);
  });
});
