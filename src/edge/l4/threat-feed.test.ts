import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ThreatFeed, parseFeed, sourceLabel, type ThreatFeedReport } from './threat-feed.ts';

const sampleFeed = fileURLToPath(new URL('./sample-threat-feed.txt', import.meta.url));

describe('parseFeed', () => {
  it('reads FireHOL and Spamhaus DROP lines, skipping comments, blanks and junk', () => {
    const parsed = parseFeed(
      [
        '# FireHOL level 1',
        '; Spamhaus DROP List 2024/06/01',
        '',
        '1.10.16.0/20 ; SBL256894',
        '  198.51.100.0/24\t# trailing comment',
        '203.0.113.7',
        '2001:db8::/32 ; SBL000000',
        'not-an-address',
        '300.1.1.1/8',
        '\r',
      ].join('\r\n'),
    );
    assert.equal(parsed.count, 4);
    assert.equal(parsed.invalidLines, 2);
  });
});

describe('ThreatFeed', { timeout: 15_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tps-threat-feed-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('loads the sample feed file: documentation ranges only, IPv4 and IPv6', async () => {
    const feed = new ThreatFeed({ sources: [sampleFeed], refreshIntervalMs: 0 });
    const report = await feed.start();
    assert.equal(report.size, 4);
    assert.deepEqual(
      report.sources.map((s) => [s.ok, s.entries, s.invalidLines]),
      [[true, 4, 0]],
    );
    for (const listed of ['192.0.2.1', '198.51.100.200', '203.0.113.9', '2001:db8::abcd', '::ffff:192.0.2.44']) {
      assert.ok(feed.has(listed), listed);
    }
    for (const clean of ['127.0.0.1', '192.0.3.1', '2001:db9::1', '::1', '::ffff:10.0.0.1']) {
      assert.ok(!feed.has(clean), clean);
    }
    feed.stop();
  });

  it('merges several sources and swaps in a re-read file on refresh', async () => {
    const first = join(dir, 'first.netset');
    const second = join(dir, 'second.txt');
    await writeFile(first, '127.0.0.9/32\n');
    await writeFile(second, '10.0.0.0/8 ; SBL1\n');
    const reports: ThreatFeedReport[] = [];
    const feed = new ThreatFeed({ sources: [first, second], refreshIntervalMs: 0, onRefresh: (r) => reports.push(r) });
    await feed.start();
    assert.ok(feed.has('127.0.0.9'));
    assert.ok(feed.has('10.1.2.3'));

    await writeFile(first, '127.0.0.10/32\n');
    const report = await feed.refresh();
    assert.equal(report.swapped, true);
    assert.ok(!feed.has('127.0.0.9'));
    assert.ok(feed.has('127.0.0.10'));
    assert.ok(feed.has('10.1.2.3'));

    const unchanged = await feed.refresh();
    assert.equal(unchanged.swapped, false, 'nothing changed, nothing rebuilt');
    assert.equal(reports.length, 3);
  });

  it('keeps the last good entries of a file that disappears, and reports the failure', async () => {
    const path = join(dir, 'vanishing.txt');
    await writeFile(path, '192.0.2.0/24\n');
    const feed = new ThreatFeed({ sources: [path], refreshIntervalMs: 0 });
    await feed.start();
    await rm(path);
    const report = await feed.refresh();
    assert.ok(feed.has('192.0.2.5'));
    const [status] = report.sources;
    assert.equal(status?.ok, false);
    assert.match(status?.error ?? '', /ENOENT/);
    assert.equal(status?.entries, 1);
  });

  it('refreshes on its timer', async () => {
    const path = join(dir, 'timed.txt');
    await writeFile(path, '192.0.2.1\n');
    let notify: (report: ThreatFeedReport) => void = () => {};
    const feed = new ThreatFeed({ sources: [path], refreshIntervalMs: 50, onRefresh: (r) => notify(r) });
    await feed.start();
    await writeFile(path, '192.0.2.2\n');
    await new Promise<ThreatFeedReport>((resolve) => {
      notify = (report) => {
        if (report.swapped) resolve(report);
      };
    });
    feed.stop();
    assert.ok(feed.has('192.0.2.2'));
    assert.ok(!feed.has('192.0.2.1'));
  });

  describe('URL sources', () => {
    let server: Server;
    let base: string;
    let body = '198.51.100.0/24 ; SBL9\n';
    let status = 200;
    let requests: Array<{ url: string | undefined; ifNoneMatch: string | undefined }> = [];
    before(async () => {
      server = createServer((request, response) => {
        requests.push({ url: request.url, ifNoneMatch: request.headers['if-none-match'] });
        const etag = `"${body.length}-${body.charCodeAt(0)}"`;
        if (status === 200 && request.headers['if-none-match'] === etag) {
          response.writeHead(304).end();
          return;
        }
        response.writeHead(status, { 'content-type': 'text/plain', etag }).end(status === 200 ? body : 'oops');
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    after(async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    });

    it('fetches over HTTP, asks conditionally, and keeps the last good set when a fetch fails', async () => {
      requests = [];
      const reports: ThreatFeedReport[] = [];
      const feed = new ThreatFeed({
        sources: [`${base}/drop.txt`],
        refreshIntervalMs: 0,
        fetchTimeoutMs: 2_000,
        onRefresh: (r) => reports.push(r),
      });
      await feed.start();
      assert.ok(feed.has('198.51.100.1'));

      const notModified = await feed.refresh();
      assert.equal(notModified.swapped, false);
      assert.equal(requests[1]?.ifNoneMatch, `"${body.length}-${body.charCodeAt(0)}"`);

      status = 503;
      const failed = await feed.refresh();
      assert.ok(feed.has('198.51.100.1'), 'the last good set stays in use');
      assert.equal(failed.sources[0]?.ok, false);
      assert.match(failed.sources[0]?.error ?? '', /HTTP 503/);

      status = 200;
      body = '2001:db8:1::/48\n';
      const recovered = await feed.refresh();
      assert.equal(recovered.sources[0]?.ok, true);
      assert.ok(!feed.has('198.51.100.1'));
      assert.ok(feed.has('2001:db8:1::7'));
      assert.equal(reports.length, 4);
    });

    it('reports an unreachable URL without throwing', async () => {
      // A port that was just free: nothing listens there.
      const probe = createServer();
      await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
      const port = (probe.address() as AddressInfo).port;
      await new Promise((resolve) => probe.close(resolve));
      const feed = new ThreatFeed({ sources: [`http://127.0.0.1:${port}/feed`], refreshIntervalMs: 0, fetchTimeoutMs: 2_000 });
      const report = await feed.start();
      assert.equal(report.sources[0]?.ok, false);
      assert.ok(report.sources[0]?.error);
      assert.equal(feed.size, 0);
    });
  });

  it('builds in shared memory for other threads, whose feeds swap in each new set whole', async () => {
    const path = join(dir, 'shared.txt');
    await writeFile(path, '192.0.2.0/24\n2001:db8::/32\n');
    const builder = new ThreatFeed({ sources: [path], refreshIntervalMs: 0, shared: true });
    const follower = ThreatFeed.fromShared();
    assert.equal(follower.size, 0);
    assert.equal(new ThreatFeed({ sources: [path], refreshIntervalMs: 0 }).sharedSet, undefined, 'only on demand');

    await builder.start();
    const first = builder.sharedSet;
    assert.ok(first !== undefined && first.nodes instanceof SharedArrayBuffer);
    assert.ok(builder.has('192.0.2.9'), 'the builder looks up in the shared set too');
    assert.ok(!follower.has('192.0.2.9'), 'nothing until adopted');
    follower.adopt(first);
    assert.ok(follower.has('192.0.2.9') && follower.has('::ffff:192.0.2.9') && follower.has('2001:db8::5'));
    assert.equal(follower.size, 2);

    await writeFile(path, '198.51.100.0/24\n');
    assert.equal((await builder.refresh()).swapped, true);
    const second = builder.sharedSet!;
    assert.notEqual(second.nodes, first.nodes, 'a new set in new memory: the one in use is never written');
    assert.ok(follower.has('192.0.2.9') && !follower.has('198.51.100.1'), 'the old set until the new one is adopted');
    follower.adopt(second);
    assert.ok(!follower.has('192.0.2.9') && follower.has('198.51.100.1'));
    assert.equal(ThreatFeed.fromShared(second).size, 1);

    assert.equal((await builder.refresh()).swapped, false);
    assert.equal(builder.sharedSet, second, 'nothing changed, nothing rebuilt');
  });

  it('fromEntries builds a fixed feed', () => {
    const feed = ThreatFeed.fromEntries(['127.0.0.9/32', '2001:db8::/32']);
    assert.ok(feed.has('127.0.0.9'));
    assert.ok(feed.has('::ffff:127.0.0.9'));
    assert.ok(!feed.has('127.0.0.8'));
  });
});

describe('threat feed sources in logs and metrics', () => {
  it('show a URL without its credentials and query, a file path as it is', () => {
    assert.equal(
      sourceLabel('https://user:s3cret@feeds.example.net/drop.txt?apikey=abc123#x'),
      'https://feeds.example.net/drop.txt?redacted',
    );
    assert.equal(sourceLabel('http://feeds.example.net/level1.netset'), 'http://feeds.example.net/level1.netset');
    assert.equal(sourceLabel('/etc/tps/feeds/drop.txt'), '/etc/tps/feeds/drop.txt');
  });
});
