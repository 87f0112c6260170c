import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { WafRequest } from '../engine.ts';
import { CompiledInspector } from '../inspector.ts';
import { compileRuleSet } from '../seclang/compiler.ts';

const REQUEST: WafRequest = {
  clientIp: '192.0.2.1',
  clientPort: 1234,
  serverIp: '192.0.2.2',
  serverPort: 80,
  method: 'GET',
  uri: '/?a=1',
  httpVersion: '1.1',
  headers: [['Host', 'example.com']],
};

test('markers: a run of markers is passed over with no jump pending, and a jump to any marker of a run lands on it', () => {
  const rules = `
SecRuleEngine On
SecAction "id:1,phase:1,pass,log,msg:'first'"
SecMarker RUN-A
SecMarker RUN-B
SecMarker RUN-C
SecAction "id:2,phase:1,pass,log,msg:'after the run'"
SecAction "id:3,phase:1,pass,nolog,skipAfter:RUN2-B"
SecAction "id:4,phase:1,pass,log,msg:'jumped over'"
SecMarker RUN2-A
SecAction "id:5,phase:1,pass,log,msg:'jumped over too'"
SecMarker RUN2-B
SecMarker RUN2-C
SecAction "id:6,phase:1,pass,log,msg:'after the jump'"
SecAction "id:7,phase:1,pass,nolog,skipAfter:RUN3-A"
SecMarker RUN3-A
SecMarker RUN3-B
SecAction "id:8,phase:1,pass,log,msg:'after a jump to the first marker of a run'"
SecMarker END-1
SecMarker END-2
`;
  const ruleSet = compileRuleSet([{ text: rules, name: 'markers.conf' }]);
  const ends = ruleSet.phaseMarkerRunEnds[1]!;
  const markers = ruleSet.phaseMarkers[1]!;
  // each marker's run ends at the last of the markers right after it
  markers.forEach((marker, k) => {
    if (marker === undefined) assert.equal(ends[k], -1);
    else {
      const end = ends[k]!;
      assert.ok(end >= k && markers[end] !== undefined && (end + 1 === markers.length || markers[end + 1] === undefined));
      for (let j = k; j <= end; j++) assert.notEqual(markers[j], undefined);
    }
  });
  const inspector = new CompiledInspector(ruleSet, { request: 1 << 20, response: 1 << 20 });
  const ids = inspector.inspectRequest(REQUEST, { paranoiaLevel: 1, mode: 'LOGGING' }).verdict.matchedRules.map((m) => m.id);
  assert.deepEqual(ids, [1, 2, 6, 8]);
});
