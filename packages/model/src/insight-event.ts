/**
 * Insight events, as the spec's Resources table shows them. The data plane produces them
 * (WAF verdicts, rate-limit episodes) through an InsightSink; the store keeps them in arrival
 * order; the export endpoint pages over them (InsightEventResource is how it shows one).
 */
import { Type } from '@sinclair/typebox';
import { Uuid } from './schema-helpers.ts';

export const INSIGHT_EVENT_TYPES = ['WAF_EVENT', 'APP_DDOS_ATTACK'] as const;
export type InsightEventType = (typeof INSIGHT_EVENT_TYPES)[number];

export interface MatchedRule {
  /** The rule's number (the spec's name for it, whatever engine matched). */
  modSecId: number;
  name: string;
  /** DISABLED with value null unless the proxy sets waf.logMatchedData (the data may hold secrets). */
  matchedData: { status: 'DISABLED'; value: null } | { status: 'ENABLED'; value: string | null };
  /**
   * The request field that matched (`ARGS:q`, `REQUEST_COOKIES:session`...), when the engine says:
   * a field name, never its value, so it is always given. It is what a rule exclusion names.
   */
  matchedVariable?: string | null;
}

export interface RequestSummary {
  method: string;
  path: string;
  /** Each entry `Name: value`. */
  headers: string[];
  /** Raw request line and headers, separated by line feeds. */
  messageHeader: string;
  /** HTTP status of the response to the client. */
  statusCode: number;
}

/** Fields every event has; `id` and `supportId` are assigned where the event is produced. */
export interface InsightEventBase {
  id: string;
  tenantId: string;
  trafficConfigId: string;
  /** ISO 8601 UTC with milliseconds. */
  timestamp: string;
  /** 32 hex characters, also shown on the block page the client saw. */
  supportId: string;
  /** Three-letter code of the edge location (setting TPS_LOCATION). */
  tpc: string;
  destinationIp: string;
  source: { countryCode: string; ip: string; port: number };
  request: RequestSummary;
}

export interface WafEvent extends InsightEventBase {
  type: 'WAF_EVENT';
  action: 'BLOCKED' | 'LOGGED';
  rules: MatchedRule[];
  /**
   * How many requests this event stands for; absent means 1. Under a flood only the first events of
   * each proxy, source and matched rule set in a minute are kept whole: the requests after them are
   * counted into a sampled event, one of those requests, carrying their number (src/insight/sampler.ts).
   */
  requestCount?: number;
  /** True when the request body was longer than the WAF inspects and only its first part was inspected (`waf.bodyLimitAction` PROCESS_PARTIAL). */
  bodyTruncated?: boolean;
}

/** The rate limiter started blocking a client: one event per client and episode, never per request. */
export interface AppDdosAttackEvent extends InsightEventBase {
  type: 'APP_DDOS_ATTACK';
  action: 'BLOCKED';
  rules: [];
  rateLimit: {
    /** The threshold that was crossed. */
    threshold: { requests: number; periodSeconds: number };
    /** Requests the client sent in that period when it was crossed. */
    observedRequests: number;
    blockSeconds: number;
    /** First request refused in this episode (ISO 8601). */
    firstBlockedAt: string;
    /** Last request refused so far in this episode (ISO 8601); updated while the episode lasts. */
    lastBlockedAt: string;
    /** Requests refused so far in this episode; updated while the episode lasts. */
    blockedRequests: number;
    /** Until when the client is refused (ISO 8601). */
    blockedUntil: string;
  };
}

export type InsightEvent = WafEvent | AppDdosAttackEvent;

/** Where the data plane hands events; the store's implementation writes them in arrival order. */
export interface InsightSink {
  record(event: InsightEvent): void;
  /** Updates the counters of an APP_DDOS_ATTACK episode already recorded (same id, same cursor place). */
  updateRateLimitEpisode(eventId: string, update: { lastBlockedAt: string; blockedRequests: number; blockedUntil: string }): void;
}

/** An event as the API answers it (insight export, the portal's event views). */
export const InsightEventResource = Type.Object({
  type: Type.String({ enum: [...INSIGHT_EVENT_TYPES] }),
  id: Uuid,
  attributes: Type.Object({
    timestamp: Type.String({ description: 'ISO 8601 UTC with milliseconds.' }),
    rules: Type.Array(
      Type.Object({
        modSecId: Type.Integer(),
        name: Type.String(),
        matchedData: Type.Object({
          status: Type.String({ enum: ['DISABLED', 'ENABLED'] }),
          value: Type.Union([Type.String(), Type.Null()]),
        }),
        matchedVariable: Type.Optional(
          Type.Union([Type.String(), Type.Null()], {
            description: 'The request field that matched (ARGS:q...): what a rule exclusion names. An extension of the spec.',
          }),
        ),
      }),
    ),
    supportId: Type.String({ pattern: '^[0-9a-f]{32}$' }),
    action: Type.String({ enum: ['BLOCKED', 'LOGGED'] }),
    tpc: Type.String({ pattern: '^[A-Z]{3}$' }),
    destinationIp: Type.String(),
    source: Type.Object({ countryCode: Type.String(), ip: Type.String(), port: Type.Integer() }),
    request: Type.Object({
      method: Type.String(),
      path: Type.String(),
      headers: Type.Array(Type.String()),
      messageHeader: Type.String(),
      statusCode: Type.Integer(),
    }),
    rateLimit: Type.Optional(
      Type.Unknown({ description: 'APP_DDOS_ATTACK only: threshold, observed and blocked requests, episode times.' }),
    ),
    requestCount: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'WAF_EVENT only: how many requests this event stands for. 1 for an event stored whole. Under a flood, the first ' +
          'events of each proxy, source IP and matched rule set in a minute are stored whole and the requests after them ' +
          'are counted: a sampled event (one of those requests, with its own id, time and request) stands for all of them. ' +
          'The requestCount of the exported events adds up to the requests blocked or logged. An extension of the spec.',
      }),
    ),
    bodyTruncated: Type.Optional(
      Type.Boolean({
        description:
          'WAF_EVENT only, present when true: the request body was longer than the WAF inspects (waf.requestBodyLimit) and only ' +
          'its first part was inspected, the rest passed uninspected (waf.bodyLimitAction PROCESS_PARTIAL). An extension of the spec.',
      }),
    ),
  }),
  relationships: Type.Object({
    belongsTo: Type.Object({ data: Type.Object({ type: Type.Literal('TENANT'), id: Uuid }) }),
    trafficConfig: Type.Object({ data: Type.Object({ type: Type.Literal('trafficConfig'), id: Uuid }) }),
  }),
});
