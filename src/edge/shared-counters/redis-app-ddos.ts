/**
 * The application-layer DDoS detector's exchange between edge nodes (TPS_REDIS_URL): once a second
 * per proxy and node, the node adds its request count of the second it just closed and reads all
 * nodes' total of the second before. One round trip per proxy and second, never per request. Keys
 * expire after a minute.
 */
import type { Redis } from 'ioredis';
import type { ClusterRateExchange } from '../http/app-ddos/types.ts';

const TTL_SECONDS = 60;

export class RedisClusterRate implements ClusterRateExchange {
  readonly #redis: Redis;
  readonly #prefix: string;

  constructor(redis: Redis, prefix = 'tps:appddos') {
    this.#redis = redis;
    this.#prefix = prefix;
  }

  async exchange(proxyId: string, second: number, count: number): Promise<number> {
    const key = `${this.#prefix}:${proxyId}:${second}`;
    const results = await this.#redis
      .multi()
      .incrby(key, Math.max(0, Math.trunc(count)))
      .expire(key, TTL_SECONDS)
      .get(`${this.#prefix}:${proxyId}:${second - 1}`)
      .exec();
    const previous = results?.[2]?.[1];
    return typeof previous === 'string' ? Number(previous) : 0;
  }
}
