import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Logger } from 'pino';
import { rateLimitedLogger } from './worker-logger.ts';

describe('edge worker logger', () => {
  it('writes a message at most `burst` times per interval, then says how many it left out', () => {
    const lines: { level: string; details: Record<string, unknown>; message: string }[] = [];
    const target = Object.fromEntries(
      ['info', 'warn', 'error'].map((level) => [
        level,
        (details: Record<string, unknown>, message: string) => lines.push({ level, details, message }),
      ]),
    ) as unknown as Logger;
    let clock = 0;
    const logger = rateLimitedLogger(target, { burst: 3, intervalMs: 1000, now: () => clock });
    for (let i = 0; i < 100; i++) logger.error({ i }, 'redis unreachable');
    logger.warn({}, 'another message');
    assert.equal(lines.filter((line) => line.message === 'redis unreachable').length, 3);
    assert.equal(lines.filter((line) => line.message === 'another message').length, 1, 'each message has its own budget');
    clock = 1000;
    logger.error({ i: 100 }, 'redis unreachable');
    assert.deepEqual(lines.at(-1), { level: 'error', details: { i: 100, suppressed: 97 }, message: 'redis unreachable' });
  });
});
