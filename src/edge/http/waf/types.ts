/**
 * The WAF hook: the slot a WAF engine plugs into (waf-hook.ts fills it with @tps/waf, tests with a
 * stand-in), what the phases hand it (phases/waf-request.ts, phases/waf-response.ts) and what it
 * answers.
 */
import type { HttpProxyAttributes, MatchedRule } from '@tps/model';

/** A proxy's `waf` attributes, defaults applied. */
export type WafSettings = NonNullable<HttpProxyAttributes['waf']>;

export interface WafRequestHead {
  proxyId: string;
  tenantId: string;
  /** The proxy's `waf` attributes (mode, paranoia level, exclusions...), defaults applied. */
  settings: WafSettings;
  /** The request's support id: put it in the event and it is the one on the block page. */
  supportId: string;
  client: { ip: string; port: number };
  server: { ip: string; port: number };
  method: string;
  /** Request target as received (path and query): what the rules inspect. */
  url: string;
  /** The canonical path (request-target.ts): what the origin is sent, and what exclusions' `pathPrefix` match. */
  path: string;
  httpVersion: '1.0' | '1.1' | '2.0';
  /** `[name, value, ...]` as received; HTTP/2 pseudo-headers left out and `host` added. */
  headers: readonly string[];
}

export interface WafRequestInput extends WafRequestHead {
  /** Up to `requestBodyLimit` bytes of the body; null when the request has none or the limit is 0. */
  body: Buffer | null;
  /** The body goes on beyond `body`. */
  bodyTruncated: boolean;
}

export interface WafResponseInput {
  request: WafRequestHead;
  statusCode: number;
  /** `[name, value, ...]` of the origin's response, lower-case names. */
  headers: readonly string[];
  /** Up to `responseBodyLimit` bytes of a text-like body (text/*, JSON, XML, JavaScript); else null. */
  body: Buffer | null;
  bodyTruncated: boolean;
}

/** What the logging phase turns into a WAF_EVENT (with the final status). */
export interface WafEventDraft {
  action: 'BLOCKED' | 'LOGGED';
  rules: MatchedRule[];
  /** The request body was longer than the WAF inspects: its verdict covers the first part only. */
  bodyTruncated?: boolean;
}

export type WafVerdict =
  | { action: 'continue'; event?: WafEventDraft }
  | {
      action: 'block';
      /** Default 403. */
      status?: number;
      /** Default: the request's support id (`WafRequestHead.supportId`). */
      supportId?: string;
      event?: WafEventDraft;
    };

export interface WafHook {
  /** Body bytes the request side inspects for proxies that do not set `waf.requestBodyLimit`; 0 = head only. */
  readonly requestBodyLimit: number;
  /** A multipart/form-data body (file uploads) may be this long and is inspected whole; default `requestBodyLimit`. */
  readonly multipartBodyLimit?: number;
  /** For proxies that do not set `waf.bodyLimitAction`; default REJECT. */
  readonly bodyLimitAction?: 'REJECT' | 'PROCESS_PARTIAL';
  inspectRequest(input: WafRequestInput): WafVerdict | Promise<WafVerdict>;
  /** Body bytes the response side wants; 0 or absent = head only. */
  readonly responseBodyLimit?: number;
  inspectResponse?(input: WafResponseInput): WafVerdict | Promise<WafVerdict>;
  /** The request is over: forget what the hook keeps for its response (nothing when already done). */
  endExchange?(supportId: string): void;
}

/**
 * Why a hook could not give a verdict: its engine's queue is full, the request ran past its
 * inspection budget, its thread or transaction is gone, or anything else.
 */
export type WafFailureReason = 'overloaded' | 'cost-share' | 'budget' | 'unavailable' | 'error';
