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

/** A distributed application-layer attack on one proxy, from its detection to its end (on one edge node). */
export interface DistributedAttack {
  /** ISO 8601: the first second over the trigger. */
  startedAt: string;
  /** ISO 8601: the last second over the trigger ended (the attack was declared over `quietSeconds` later). */
  endedAt: string;
  /** Requests per second the proxy normally has (learned) when the attack started. */
  baselineRate: number;
  /** Requests per second above which the attack was declared. */
  triggerRate: number;
  /** Highest requests per second during the attack. */
  peakRate: number;
  /** Requests to the proxy during the attack. */
  requests: number;
  /** Distinct sources (IPv4 addresses, IPv6 /64) seen during the attack (approximate beyond the tracked sources). */
  sources: number;
  /** Challenge pages served. */
  challenged: number;
  /** Challenges solved (clearances given). */
  solved: number;
  /** Requests let through to the origin (cleared or exempted clients). */
  passed: number;
  /** Requests refused because their source kept ignoring the challenge. */
  blocked: number;
  /** Requests of cleared or exempted clients refused because the origin's rate cap (originRateLimit) was reached. */
  shed: number;
  /** The proxy's mode then. */
  mode: 'AUTO' | 'ALWAYS';
}

/**
 * The other kind of APP_DDOS_ATTACK event, told apart by `action` CHALLENGED: a flood from many
 * sources together was detected on a proxy and mitigated by the challenge. One event per attack
 * episode and edge node, recorded when it ends. `source` and `request` are those of the first
 * request of the attack the recording worker saw.
 */
export interface DistributedAttackEvent extends InsightEventBase {
  type: 'APP_DDOS_ATTACK';
  action: 'CHALLENGED';
  rules: [];
  attack: DistributedAttack;
}

export type InsightEvent = WafEvent | AppDdosAttackEvent | DistributedAttackEvent;

/** Where the data plane hands events; the store's implementation writes them in arrival order. */
export interface InsightSink {
  record(event: InsightEvent): void;
  /** Updates the counters of an APP_DDOS_ATTACK episode already recorded (same id, same cursor place). */
  updateRateLimitEpisode(eventId: string, update: { lastBlockedAt: string; blockedRequests: number; blockedUntil: string }): void;
}

/** The `attack` member of a CHALLENGED APP_DDOS_ATTACK event, as the API shows it. An extension of the spec. */
export const DistributedAttackResource = Type.Object(
  {
    startedAt: Type.String({ description: 'ISO 8601: the first second over the trigger.' }),
    endedAt: Type.String({
      description: 'ISO 8601: the end of the last second over the trigger (declared over TPS_APP_DDOS_QUIET_SECONDS later).',
    }),
    baselineRate: Type.Number({ description: 'Requests per second the proxy normally had (learned) when the attack started.' }),
    triggerRate: Type.Number({ description: 'Requests per second above which the attack was declared.' }),
    peakRate: Type.Number({ description: 'Highest requests per second during the attack.' }),
    requests: Type.Integer({ description: 'Requests to the proxy during the attack.' }),
    sources: Type.Integer({ description: 'Distinct sources (IPv4 address, IPv6 /64) seen; approximate past the sources tracked.' }),
    challenged: Type.Integer({ description: 'Challenge pages served.' }),
    solved: Type.Integer({ description: 'Challenges solved (clearance cookies given).' }),
    passed: Type.Integer({ description: 'Requests let through to the origin (cleared or exempted clients).' }),
    blocked: Type.Integer({ description: 'Requests refused because their source kept ignoring the challenge.' }),
    shed: Type.Integer({ description: 'Requests of cleared or exempted clients refused over appDdos.originRateLimit.' }),
    mode: Type.String({ enum: ['AUTO', 'ALWAYS'] }),
  },
  {
    description:
      'CHALLENGED APP_DDOS_ATTACK events only: one distributed attack on the proxy, counted on one edge node, recorded when it ended. ' +
      'An extension of the spec.',
  },
);

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
    action: Type.String({
      enum: ['BLOCKED', 'LOGGED', 'CHALLENGED'],
      description: 'CHALLENGED: an APP_DDOS_ATTACK event of a distributed attack mitigated by the challenge (with `attack`).',
    }),
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
    attack: Type.Optional(DistributedAttackResource),
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

/**
 * A distributed attack as `GET /api/v2/insight/ddos-attacks` lists it: the CHALLENGED
 * APP_DDOS_ATTACK event of one episode on one edge node (same id), its figures first.
 */
export const DdosAttackResource = Type.Object({
  type: Type.Literal('ddosAttack'),
  id: Uuid,
  attributes: Type.Object({
    ...DistributedAttackResource.properties,
    supportId: Type.String({ pattern: '^[0-9a-f]{32}$', description: 'Shown on the challenge pages of the attack.' }),
    tpc: Type.String({ pattern: '^[A-Z]{3}$', description: 'The edge location that counted it.' }),
    destinationIp: Type.String(),
    firstSource: Type.Object(
      { countryCode: Type.String(), ip: Type.String(), port: Type.Integer() },
      { description: 'The source of the first request of the attack the recording worker saw.' },
    ),
  }),
  relationships: Type.Object({
    belongsTo: Type.Object({ data: Type.Object({ type: Type.Literal('TENANT'), id: Uuid }) }),
    trafficConfig: Type.Object({ data: Type.Object({ type: Type.Literal('trafficConfig'), id: Uuid }) }),
  }),
});
