/**
 * The edge node's threat-feed thread (threat-feed-host.ts says why a thread): runs the one
 * ThreatFeed of the node (sources, timer, conditional requests, last good entries) with its sets
 * built in shared memory, and reports every refresh to the supervisor, with the new set when one
 * was built.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ThreatFeed } from '../l4/threat-feed.ts';
import type { FromThreatFeedThread, ThreatFeedThreadSettings } from './threat-feed-host.ts';

const port = parentPort!;
const settings = workerData as ThreatFeedThreadSettings;

const feed: ThreatFeed = new ThreatFeed({
  sources: settings.sources,
  refreshIntervalMs: settings.refreshIntervalMs,
  shared: true,
  onRefresh: (report) =>
    port.postMessage({ kind: 'report', report, set: report.swapped ? feed.sharedSet : undefined } satisfies FromThreatFeedThread),
});

// The feed's timer is unref'd (a feed alone keeps no process alive); this thread lives until the
// supervisor terminates it.
setInterval(() => {}, 1 << 30);
void feed.start();
