/** The types the edge runtime's modules (supervisor, threat-feed host) share with their callers. Types only. */

/** Where the supervisor and its helpers log (pino's signature fits). */
export interface EdgeLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}
