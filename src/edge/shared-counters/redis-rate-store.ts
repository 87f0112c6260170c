/**
 * Rate-limit counters in Redis, for several edge nodes: a client's requests count once whichever
 * node (and worker) serves them. The same sliding-window estimate as the in-memory stores
 * (src/edge/limits/sliding-window.ts: a window index, the previous and the current count per period), written out
 * in Lua so that one script per request does the read-modify-write atomically on the server.
 *
 * Each proxy (scope) keeps at most `maxClients` clients: an index of its keys by last use (a sorted
 * set) is trimmed oldest first by the script that adds to it. So a flood of sources on one proxy
 * pushes out that proxy's own oldest clients, never another proxy's counters or blocks, as long as
 * Redis has room for the proxies' shares (its own eviction policy would otherwise pick keys of any
 * proxy). A blocked client is indexed at its block's end, so it is the last of its proxy to go.
 */
import type { Redis } from 'ioredis';
import type { RateHit, RateLimitStore } from '../limits/rate-store.ts';

/**
 * KEYS[1] = client key, KEYS[2] = the proxy's index; ARGV = now (ms), max clients, number of
 * periods, then each period (ms). Returns [blockedUntil, estimate...].
 */
const HIT = `
local key = KEYS[1]
local index = KEYS[2]
local now = tonumber(ARGV[1])
local maxClients = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local blocked = tonumber(redis.call('HGET', key, 'b') or '0')
local out = { tostring(blocked) }
if blocked > now then return out end
local longest = 0
for i = 1, n do
  local period = tonumber(ARGV[3 + i])
  if period > longest then longest = period end
  local window = math.floor(now / period)
  local seen = tonumber(redis.call('HGET', key, 'w' .. i) or '-1')
  local previous = tonumber(redis.call('HGET', key, 'p' .. i) or '0')
  local current = tonumber(redis.call('HGET', key, 'c' .. i) or '0')
  if window ~= seen then
    if window == seen + 1 then previous = current else previous = 0 end
    current = 0
  end
  current = current + 1
  redis.call('HSET', key, 'w' .. i, window, 'p' .. i, previous, 'c' .. i, current)
  out[i + 1] = tostring(previous * (1 - (now - window * period) / period) + current)
end
redis.call('PEXPIRE', key, 2 * longest)
redis.call('ZADD', index, now, key)
local excess = redis.call('ZCARD', index) - maxClients
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', index, excess)
  for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
end
if redis.call('PTTL', index) < 2 * longest then redis.call('PEXPIRE', index, 2 * longest) end
return out
`;

/** KEYS[1] = client key, KEYS[2] = the proxy's index; ARGV = until (ms), keep (ms). The block clears the counters: the client starts afresh after it. */
const BLOCK = `
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'b', ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('ZADD', KEYS[2], tonumber(ARGV[1]), KEYS[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2])) end
return 1
`;

export interface RedisRateLimitStoreOptions {
  /** Clients this proxy keeps counters for; the least recently seen go first. Default 16,384. */
  maxClients?: number;
}

export class RedisRateLimitStore implements RateLimitStore {
  readonly #redis: Redis;
  readonly #prefix: string;
  readonly #index: string;
  readonly #periodsMs: readonly number[];
  readonly #maxClients: number;

  /** `scope` separates proxies (and their thresholds): one Redis serves every proxy of every node. */
  constructor(redis: Redis, scope: string, periodsMs: readonly number[], options: RedisRateLimitStoreOptions = {}) {
    if (periodsMs.length === 0) throw new Error('at least one period');
    this.#redis = redis;
    // The braces are a Redis Cluster hash tag: a proxy's keys and its index live on one shard.
    this.#prefix = `tps:rl:{${scope}}:`;
    this.#index = `tps:rl:{${scope}}`;
    this.#periodsMs = periodsMs;
    this.#maxClients = Math.max(1, options.maxClients ?? 16_384);
  }

  async hit(key: string, now: number): Promise<RateHit> {
    const reply = (await this.#redis.eval(
      HIT,
      2,
      this.#prefix + key,
      this.#index,
      now,
      this.#maxClients,
      this.#periodsMs.length,
      ...this.#periodsMs,
    )) as string[];
    return { blockedUntil: Number(reply[0]), estimates: reply.slice(1).map(Number) };
  }

  async block(key: string, until: number): Promise<void> {
    const keepMs = Math.max(1, until - Date.now()) + 2 * Math.max(...this.#periodsMs);
    await this.#redis.eval(BLOCK, 2, this.#prefix + key, this.#index, until, keepMs);
  }

  /** Clients held are in Redis, bounded per proxy by `maxClients` and the keys' expiry. */
  get size(): number {
    return 0;
  }
}
