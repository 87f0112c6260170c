/**
 * Routes anyone can call with a body (the token endpoint, portal sign-in) are rate limited per
 * address before the body is read: a refused client is answered (429, connection closed) as soon
 * as its head is whole, and its body, however slow, is never waited for.
 */
import type { FastifyRequest } from 'fastify';

/** The route config that moves the route's rate limit (@fastify/rate-limit) to onRequest. */
export const RATE_LIMITED_BEFORE_BODY = { rateLimit: { hook: 'onRequest' } } as const;

/** Whether the request's route is limited before its body. */
export function isRateLimitedBeforeBody(request: FastifyRequest): boolean {
  const rateLimit = request.routeOptions.config.rateLimit;
  return typeof rateLimit === 'object' && rateLimit.hook === 'onRequest';
}
