/**
 * Rate-limit counters in Redis, for several edge nodes: a client's requests count once whichever
 * node (and worker) serves them. The same two-window estimate as the in-memory stores, done by one
 * Lua script per request so that the read-modify-write is atomic on the server.
 */
import { Redis } from 'ioredis';
import type { RateHit, RateLimitStore } from '../http/rate-limit/store.ts';

/** KEYS[1] = client key; ARGV = now (ms), number of periods, then each period (ms). Returns [blockedUntil, estimate...]. */
const HIT = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local blocked = tonumber(redis.call('HGET', key, 'b') or '0')
local out = { tostring(blocked) }
if blocked > now then return out end
local longest = 0
for i = 1, n do
  local period = tonumber(ARGV[2 + i])
  if period > longest then longest = period end
  local index = math.floor(now / period)
  local seen = tonumber(redis.call('HGET', key, 'w' .. i) or '-1')
  local previous = tonumber(redis.call('HGET', key, 'p' .. i) or '0')
  local current = tonumber(redis.call('HGET', key, 'c' .. i) or '0')
  if index ~= seen then
    if index == seen + 1 then previous = current else previous = 0 end
    current = 0
  end
  current = current + 1
  redis.call('HSET', key, 'w' .. i, index, 'p' .. i, previous, 'c' .. i, current)
  out[i + 1] = tostring(previous * (1 - (now - index * period) / period) + current)
end
redis.call('PEXPIRE', key, 2 * longest)
return out
`;

/** KEYS[1] = client key; ARGV = until (ms), keep (ms). The block clears the counters: the client starts afresh after it. */
const BLOCK = `
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'b', ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
`;

export class RedisRateLimitStore implements RateLimitStore {
  readonly #redis: Redis;
  readonly #prefix: string;
  readonly #periodsMs: readonly number[];

  /** `scope` separates proxies (and their thresholds): one Redis serves every proxy of every node. */
  constructor(redis: Redis, scope: string, periodsMs: readonly number[]) {
    if (periodsMs.length === 0) throw new Error('at least one period');
    this.#redis = redis;
    this.#prefix = `tps:rl:${scope}:`;
    this.#periodsMs = periodsMs;
  }

  async hit(key: string, now: number): Promise<RateHit> {
    const reply = (await this.#redis.eval(HIT, 1, this.#prefix + key, now, this.#periodsMs.length, ...this.#periodsMs)) as string[];
    return { blockedUntil: Number(reply[0]), estimates: reply.slice(1).map(Number) };
  }

  async block(key: string, until: number): Promise<void> {
    const keepMs = Math.max(1, until - Date.now()) + 2 * Math.max(...this.#periodsMs);
    await this.#redis.eval(BLOCK, 1, this.#prefix + key, until, keepMs);
  }

  /** Clients held are in Redis, bounded by its own memory policy and the keys' expiry. */
  get size(): number {
    return 0;
  }
}
