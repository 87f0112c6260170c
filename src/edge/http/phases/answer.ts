/**
 * What a phase answers: a response the proxy makes itself, and the names of the phases that may.
 * Apart from phase.ts (the phases' shapes, which take the RequestCtx) because the RequestCtx records
 * which phase answered: in one file the two would import each other.
 */

/** The phases that may answer a request themselves (`internal`: a phase that failed). */
export type PhaseName =
  | 'accept'
  | 'request-target'
  | 'acme-challenge'
  | 'geo-fence'
  | 'rate-limit'
  | 'app-ddos'
  | 'waf'
  | 'upstream'
  | 'waf-response'
  | 'internal';

/** A response the proxy makes itself. */
export interface Answer {
  readonly phase: PhaseName;
  readonly status: number;
  /** Flat list `[name, value, name, value...]`, lower-case names, no framing headers. */
  readonly headers: readonly string[];
  readonly body: string;
  /** Close the client connection afterwards (HTTP/1): the request body was not read and must not be. */
  readonly close?: boolean;
}

export type PhaseOutcome = Answer | undefined;
