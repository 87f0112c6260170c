/**
 * The shapes of the HTTP proxy's phases, after Pingora's `ProxyHttp` hooks (their order: index.ts).
 *
 * A request phase looks at the per-request `RequestCtx` and either lets the request go on
 * (returns undefined) or answers the client itself (returns an `Answer`, and no later phase runs).
 * Phases return synchronously when they can: the runner only pays for a promise when a phase
 * really waits (a WAF verdict, a shared rate-limit store, an ACME lookup).
 */
import type { RequestCtx } from '../ctx.ts';
import type { Answer, PhaseName, PhaseOutcome } from './answer.ts';

/** Pingora's `request_filter`: runs on the request before anything of it goes to an origin. */
export interface RequestPhase {
  readonly name: PhaseName;
  /** Runs once per request, after the phases before it let the request through. */
  run(ctx: RequestCtx): PhaseOutcome | Promise<PhaseOutcome>;
}

/** The origin's response while a response phase holds it back: nothing of it went to the client yet. */
export interface HeldResponse {
  readonly status: number;
  /** The origin's headers as the client is to get them (hop-by-hop ones dropped), flat; not to be changed (see `onResponseHead`). */
  readonly headers: readonly string[];
  /** The body received so far. */
  readonly chunks: Buffer[];
  length: number;
  /** The phase waits for more of the body before it decides. */
  wantsBody: boolean;
  /** The origin's body is complete. */
  ended: boolean;
}

/** What the upstream exchange offers a response phase that holds its response. */
export interface ResponseRelay {
  /** The client went away: a decision has nobody to answer. */
  readonly clientGone: boolean;
  /** Lets the held head and body go on (to the later response phases, then the client), then the rest of the origin's body stream. */
  releaseHeld(): void;
  /** Drops the origin's response (and its connection) and answers with `answer` instead. */
  replaceResponse(answer: Answer): void;
}

/**
 * Pingora's `upstream_response_filter` and `upstream_response_body_filter`: runs on the origin's
 * response before anything of it goes to the client, and may hold it back (head and a body prefix)
 * until it has decided.
 *
 * The exchange runs the list (index.ts) in order: the first phase that holds the response has it
 * until it decides; once it releases it, the phases after it see the head, and what was held of
 * the body, in turn. A phase with nothing to do costs its `onResponseHead` check.
 */
export interface ResponsePhase {
  readonly name: PhaseName;
  /**
   * The origin's final response head arrived. Undefined: the response goes on to the next phase,
   * or to the client (the phase has nothing to do). Else the exchange holds the response in the
   * returned `HeldResponse`, feeds it the body while `wantsBody`, and calls `decide`.
   */
  onResponseHead(ctx: RequestCtx, method: string, status: number, headers: readonly string[]): HeldResponse | undefined;
  /** A chunk of a held response's body arrived (already in `held`): true when the phase decides now. */
  onResponseBody(ctx: RequestCtx, held: HeldResponse): boolean;
  /** The origin's body of a held response is complete: true when the phase decides now. */
  onResponseEnd(ctx: RequestCtx, held: HeldResponse): boolean;
  /**
   * Decides on the held response: `relay.releaseHeld()` or `relay.replaceResponse()`, never before
   * this call returns (the exchange first tells the origin's connection to pause).
   */
  decide(ctx: RequestCtx, held: HeldResponse, relay: ResponseRelay): void;
}

/** Pingora's `logging`: runs once per request when its response is over, whoever answered. */
export interface EndPhase {
  readonly name: 'logging';
  run(ctx: RequestCtx): void;
}
