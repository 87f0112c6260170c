/**
 * The threat-intelligence feed: source addresses that layer 4 proxies refuse before a byte reaches
 * the origin (when a proxy has `threatIntelligence.enabled`).
 *
 * Operators configure the sources, each a file path or an http(s) URL of a list with one IPv4 or
 * IPv6 address or CIDR per line and `#` or `;` comments, as FireHOL (`firehol_level1.netset`) and
 * Spamhaus DROP (`1.10.16.0/20 ; SBL256894`) publish them. Every `refreshIntervalMs` all sources
 * are read again; the merged set is built aside and swapped in with one assignment, so a lookup
 * sees either the old set or the new one, never half of each. A source that cannot be read keeps
 * its last good entries, and the failure is reported (`status`, `onRefresh`).
 *
 * One feed serves a whole edge node. Reading and building happen once per node, in a thread of
 * their own (src/edge/runtime/threat-feed-thread.ts, run by the supervisor): a 500,000-entry build
 * blocks a loop for most of a second, which must be neither a proxy worker's nor the supervisor's.
 * That feed is made with `shared: true`, so each set it builds lives in SharedArrayBuffers
 * (`sharedSet`); the supervisor posts it to every proxy worker, including one started later, whose
 * feed (`ThreatFeed.fromShared`) swaps in a read-only view over the same memory with one assignment
 * (`adopt`): no copy per worker, and a lookup still sees the old set or the new one, never half.
 * Within a worker, one feed object is shared by all its proxies.
 */
import { readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { IpSet, parsePrefixInto, type SharedIpSet } from '../../net/ip-set.ts';

export const DEFAULT_REFRESH_INTERVAL_MS = 60 * 60 * 1000; // Spamhaus asks for no more than hourly
export const DEFAULT_FETCH_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_SOURCE_BYTES = 64 * 1024 * 1024;

export interface ThreatFeedOptions {
  /** File paths or http(s) URLs. */
  sources: readonly string[];
  /** How often every source is read again. Default one hour; 0 = only on `refresh()`. */
  refreshIntervalMs?: number;
  /** Per URL fetch, headers and body. Default 30 s. */
  fetchTimeoutMs?: number;
  /** A source larger than this is refused (its last good entries stay). Default 64 MiB. */
  maxSourceBytes?: number;
  /** Called after every refresh, with each source's state; the place to log a failing source. */
  onRefresh?: (report: ThreatFeedReport) => void;
  /** Builds each new set in SharedArrayBuffers (`sharedSet`), for other threads to look up in. */
  shared?: boolean;
}

export interface ThreatFeedSourceStatus {
  source: string;
  /** False when the last attempt failed; `entries` are then those of the last good read. */
  ok: boolean;
  /** Addresses and networks read from the source (last good read). */
  entries: number;
  /** Lines that were neither empty, a comment, nor an address or CIDR (last good read). */
  invalidLines: number;
  /** When the entries in use were read; undefined until the first good read. */
  loadedAt?: Date;
  /** Why the last attempt failed. */
  error?: string;
}

export interface ThreatFeedReport {
  sources: ThreatFeedSourceStatus[];
  /** Disjoint prefixes in the set in use. */
  size: number;
  /** Whether this refresh built and swapped in a new set (false when no source changed). */
  swapped: boolean;
}

/** Parsed entries of one source: five words per entry, the 128-bit key then its length. */
interface SourceEntries {
  prefixes: Uint32Array;
  count: number;
  invalidLines: number;
  digest: string;
}

interface SourceState {
  status: ThreatFeedSourceStatus;
  entries?: SourceEntries;
  /** HTTP validators of the last good response, for conditional requests. */
  etag?: string;
  lastModified?: string;
}

/**
 * A source as logs and metrics may show it: an http(s) URL without its user, password and query
 * (commercial feeds put API keys there); a file path as it is.
 */
export function sourceLabel(source: string): string {
  if (!/^https?:\/\//i.test(source)) return source;
  try {
    const url = new URL(source);
    url.username = '';
    url.password = '';
    if (url.search !== '') url.search = '?redacted';
    url.hash = '';
    return url.toString();
  } catch {
    return '(unreadable URL)';
  }
}

export class ThreatFeed {
  private set: IpSet = new IpSet(2);
  private sources: Map<string, SourceState> = new Map();
  private readonly refreshIntervalMs: number;
  private readonly fetchTimeoutMs: number;
  private readonly maxSourceBytes: number;
  private readonly onRefresh: ((report: ThreatFeedReport) => void) | undefined;
  private readonly shared: boolean;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<ThreatFeedReport> | undefined;
  private builtFrom = '';

  constructor(options: ThreatFeedOptions) {
    this.refreshIntervalMs = options.refreshIntervalMs ?? DEFAULT_REFRESH_INTERVAL_MS;
    this.fetchTimeoutMs = options.fetchTimeoutMs ?? DEFAULT_FETCH_TIMEOUT_MS;
    this.maxSourceBytes = options.maxSourceBytes ?? DEFAULT_MAX_SOURCE_BYTES;
    this.onRefresh = options.onRefresh;
    this.shared = options.shared ?? false;
    this.setSourceList(options.sources);
  }

  /** A fixed feed of the given addresses and CIDRs (no sources, no refresh): for tests and tools. */
  static fromEntries(entries: Iterable<string>): ThreatFeed {
    const feed = new ThreatFeed({ sources: [], refreshIntervalMs: 0 });
    const set = new IpSet();
    for (const entry of entries) set.add(entry);
    feed.set = set;
    return feed;
  }

  /**
   * A feed that reads no source: it looks up in sets another thread's feed built (`sharedSet`),
   * given now and then to `adopt`. Until the first, it is empty.
   */
  static fromShared(shared?: SharedIpSet): ThreatFeed {
    const feed = new ThreatFeed({ sources: [], refreshIntervalMs: 0 });
    if (shared !== undefined) feed.adopt(shared);
    return feed;
  }

  /** Swaps in a set built elsewhere (a read-only view over its shared memory, nothing copied). */
  adopt(shared: SharedIpSet): void {
    this.set = IpSet.fromShared(shared);
  }

  /** The set in use, in shared memory: present once a feed made with `shared: true` has built one, or after `adopt`. */
  get sharedSet(): SharedIpSet | undefined {
    return this.set.isShared ? this.set.toShared() : undefined;
  }

  /** Whether the client address is listed. IPv4-mapped IPv6 addresses match IPv4 entries. */
  has(ip: string): boolean {
    return this.set.has(ip);
  }

  /** Disjoint prefixes in the set in use. */
  get size(): number {
    return this.set.size;
  }

  get status(): ThreatFeedSourceStatus[] {
    return [...this.sources.values()].map((state) => ({ ...state.status }));
  }

  /** Reads every source once, then keeps refreshing on the timer. Resolves after the first read. */
  async start(): Promise<ThreatFeedReport> {
    const report = await this.refresh();
    this.schedule();
    return report;
  }

  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Replaces the source list (entries of sources that stay are kept) and refreshes. */
  setSources(sources: readonly string[]): Promise<ThreatFeedReport> {
    this.setSourceList(sources);
    return this.refresh();
  }

  /** Reads every source now. Concurrent calls share one refresh. */
  refresh(): Promise<ThreatFeedReport> {
    this.inFlight ??= this.refreshAll().finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  private setSourceList(sources: readonly string[]): void {
    const next = new Map<string, SourceState>();
    for (const source of sources) {
      next.set(source, this.sources.get(source) ?? { status: { source, ok: false, entries: 0, invalidLines: 0 } });
    }
    this.sources = next;
  }

  private schedule(): void {
    if (this.refreshIntervalMs <= 0) return;
    this.timer = setTimeout(() => {
      void this.refresh().finally(() => {
        if (this.timer !== undefined) this.schedule();
      });
    }, this.refreshIntervalMs);
    // The feed alone must not keep a process alive.
    this.timer.unref();
  }

  private async refreshAll(): Promise<ThreatFeedReport> {
    const states = [...this.sources.values()];
    await Promise.all(states.map((state) => this.load(state)));
    // Sources that were replaced while loading are not part of the set.
    const current = [...this.sources.values()];
    const fingerprint = current.map((state) => `${state.status.source}\0${state.entries?.digest ?? ''}`).join('\n');
    let swapped = false;
    if (fingerprint !== this.builtFrom) {
      const built = buildSet(current);
      // The copy into shared memory is a memcpy (tens of ms for 500,000 entries); the builder's own arrays go.
      this.set = this.shared ? IpSet.fromShared(built.toShared()) : built;
      this.builtFrom = fingerprint;
      swapped = true;
    }
    const report: ThreatFeedReport = { sources: this.status, size: this.set.size, swapped };
    this.onRefresh?.(report);
    return report;
  }

  private async load(state: SourceState): Promise<void> {
    const { source } = state.status;
    try {
      const text = isUrl(source) ? await this.fetchSource(state) : await this.readSource(source);
      if (text !== undefined) {
        const entries = parseFeed(text);
        state.entries = entries;
        state.status.entries = entries.count;
        state.status.invalidLines = entries.invalidLines;
      }
      state.status.ok = true;
      state.status.loadedAt = new Date();
      delete state.status.error;
    } catch (error) {
      state.status.ok = false;
      state.status.error = error instanceof Error ? error.message : String(error);
    }
  }

  private async readSource(path: string): Promise<string> {
    const data = await readFile(path.startsWith('file:') ? new URL(path) : path);
    if (data.length > this.maxSourceBytes) throw new Error(`larger than ${this.maxSourceBytes} bytes`);
    return data.toString('utf8');
  }

  /** The body, or undefined when the server says it has not changed (304). */
  private async fetchSource(state: SourceState): Promise<string | undefined> {
    const headers: Record<string, string> = { accept: 'text/plain, */*' };
    if (state.entries !== undefined && state.etag !== undefined) headers['if-none-match'] = state.etag;
    if (state.entries !== undefined && state.lastModified !== undefined) headers['if-modified-since'] = state.lastModified;
    const response = await fetch(state.status.source, { headers, signal: AbortSignal.timeout(this.fetchTimeoutMs) });
    if (response.status === 304 && state.entries !== undefined) {
      await response.body?.cancel();
      return undefined;
    }
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`HTTP ${response.status} ${response.statusText}`.trim());
    }
    const declared = Number(response.headers.get('content-length') ?? '0');
    if (declared > this.maxSourceBytes) {
      await response.body?.cancel();
      throw new Error(`larger than ${this.maxSourceBytes} bytes`);
    }
    const chunks: Uint8Array[] = [];
    let total = 0;
    if (response.body !== null) {
      const reader = response.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        total += value.length;
        if (total > this.maxSourceBytes) {
          await reader.cancel();
          throw new Error(`larger than ${this.maxSourceBytes} bytes`);
        }
        chunks.push(value);
      }
    }
    const etag = response.headers.get('etag');
    const lastModified = response.headers.get('last-modified');
    if (etag !== null) state.etag = etag;
    else delete state.etag;
    if (lastModified !== null) state.lastModified = lastModified;
    else delete state.lastModified;
    return Buffer.concat(chunks, total).toString('utf8');
  }
}

function isUrl(source: string): boolean {
  return source.startsWith('http://') || source.startsWith('https://');
}

/**
 * Parses a feed: one address or CIDR per line; `#` and `;` start comments (whole-line or trailing);
 * anything after the first whitespace-separated token is ignored. Walks the text by index, without
 * a substring per line, since a feed may have hundreds of thousands of lines.
 */
export function parseFeed(text: string): SourceEntries {
  let prefixes = new Uint32Array(5 * 1024);
  let count = 0;
  let invalidLines = 0;
  const key = new Uint32Array(4);
  let lineStart = 0;
  while (lineStart < text.length) {
    let lineEnd = text.indexOf('\n', lineStart);
    if (lineEnd === -1) lineEnd = text.length;
    let start = lineStart;
    let end = lineStart;
    // Skip leading blanks, then take the token up to a blank or a comment sign.
    while (start < lineEnd && isBlank(text.charCodeAt(start))) start++;
    end = start;
    while (end < lineEnd) {
      const code = text.charCodeAt(end);
      if (isBlank(code) || code === 35 /* # */ || code === 59 /* ; */) break;
      end++;
    }
    if (end > start) {
      const parsed = parsePrefixInto(text, key, start, end);
      if (parsed === undefined) {
        invalidLines++;
      } else {
        if (5 * (count + 1) > prefixes.length) {
          const larger = new Uint32Array(prefixes.length * 2);
          larger.set(prefixes);
          prefixes = larger;
        }
        const offset = 5 * count++;
        prefixes.set(key, offset);
        prefixes[offset + 4] = parsed.family === 4 ? 96 + parsed.length : parsed.length;
      }
    }
    lineStart = lineEnd + 1;
  }
  prefixes = prefixes.slice(0, 5 * count);
  const digest = createHash('sha256').update(prefixes).digest('base64');
  return { prefixes, count, invalidLines, digest };
}

function isBlank(code: number): boolean {
  return code === 32 || code === 9 || code === 13;
}

function buildSet(states: readonly SourceState[]): IpSet {
  let total = 0;
  for (const state of states) total += state.entries?.count ?? 0;
  // A trie of n leaves has fewer than 2n nodes.
  const set = new IpSet(2 * total + 2);
  for (const state of states) {
    const entries = state.entries;
    if (entries === undefined) continue;
    const { prefixes } = entries;
    for (let offset = 0; offset < prefixes.length; offset += 5) {
      set.insert(prefixes, prefixes[offset + 4]!, offset);
    }
  }
  set.prepare(); // before the swap, so that no connection pays for it
  return set;
}
