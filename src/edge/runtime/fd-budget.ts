/**
 * The default of TPS_EDGE_MAX_CONNECTIONS, from the process's file-descriptor limit: every client
 * connection is a descriptor, and so is the origin connection it needs, so the edge gets half of
 * what is left once a reserve is kept back for the rest of the process:
 *
 *   reserve = BASE_FD_RESERVE + TPS_API_MAX_CONNECTIONS (tps serve only) + TPS_METRICS_MAX_CONNECTIONS
 *   budget  = floor((soft RLIMIT_NOFILE - reserve) / 2)
 *
 * A layer 4 UDP session takes a place too but costs one descriptor, its upstream socket (its
 * clients share the front-end socket, one per listener, bound at start): priced as a TCP
 * connection, a budget full of sessions leaves descriptors over, never short. One count for both
 * keeps the budget a single number the workers share; the over-provision is the price.
 *
 * The API's and the operators' listeners are capped at accept (src/listener-guard.ts), so their
 * share of the reserve is theirs whatever the edge holds, and the edge's budget is its own whatever
 * they hold: no listener can take another's descriptors.
 *
 * Node has no getrlimit; Linux shows the limit in /proc/self/limits. Node raises its soft limit
 * to the hard one at start, so that is what this reads.
 */

/**
 * Descriptors kept for everything that is neither an edge connection nor a connection of the
 * service's listeners: the store (SQLite file and WAL, or the PostgreSQL pool), the insight
 * writer's own store connection, Redis, log files, the worker threads' and WAF threads' event
 * loops, DNS sockets, CRL and threat-feed fetches, ACME, stdio.
 */
export const BASE_FD_RESERVE = 1024;

/** The budget where the limit cannot be read (not Linux). */
export const FALLBACK_EDGE_MAX_CONNECTIONS = 10_000;

/** The highest derived budget, whatever the limit (an unlimited one included). */
const MAX_DERIVED = 1_048_576;

/** A derived budget below this is not worth serving with: the start stops and says why. */
export const MIN_DERIVED_EDGE_MAX_CONNECTIONS = 100;

/** The soft limit of open files from the text of /proc/self/limits; undefined if it says none; Infinity for "unlimited". */
export function parseOpenFilesLimit(limitsText: string): number | undefined {
  const match = /^Max open files\s+(\S+)/m.exec(limitsText);
  if (match === null) return undefined;
  if (match[1] === 'unlimited') return Number.POSITIVE_INFINITY;
  const value = Number(match[1]);
  return Number.isSafeInteger(value) && value > 0 ? value : undefined;
}

export interface EdgeBudget {
  maxConnections: number;
  /** Where the number comes from: the operator's setting, the derivation, or the fallback. */
  source: 'setting' | 'derived' | 'fallback';
  /** The soft file-descriptor limit read; undefined where it cannot be read. */
  fdLimit: number | undefined;
  reserve: number;
}

export class EdgeBudgetError extends Error {}

/**
 * The edge's budget of client connections. `configured`: TPS_EDGE_MAX_CONNECTIONS (undefined:
 * derived). Throws EdgeBudgetError when the limit leaves too little room, or when the configured
 * budget needs more descriptors than the limit has after the reserve.
 */
export function edgeBudget(options: {
  configured: number | undefined;
  fdLimit: number | undefined;
  /** TPS_API_MAX_CONNECTIONS on `tps serve`, 0 on `tps edge` (no API listener). */
  apiMaxConnections: number;
  metricsMaxConnections: number;
}): EdgeBudget {
  const reserve = BASE_FD_RESERVE + options.apiMaxConnections + options.metricsMaxConnections;
  const { fdLimit, configured } = options;
  const room = fdLimit === undefined ? undefined : Math.floor((fdLimit - reserve) / 2);
  if (configured !== undefined) {
    if (room !== undefined && configured > room) {
      throw new EdgeBudgetError(
        `TPS_EDGE_MAX_CONNECTIONS: ${configured} connections need ${2 * configured + reserve} file descriptors (one per client ` +
          `connection, one per origin connection, ${reserve} kept for the API, the operators' listener and the store), ` +
          `but the limit is ${fdLimit}: raise it (systemd LimitNOFILE, ulimit -n) or lower the setting to at most ${Math.max(0, room)}`,
      );
    }
    return { maxConnections: configured, source: 'setting', fdLimit, reserve };
  }
  if (room === undefined) return { maxConnections: FALLBACK_EDGE_MAX_CONNECTIONS, source: 'fallback', fdLimit, reserve };
  if (room < MIN_DERIVED_EDGE_MAX_CONNECTIONS) {
    throw new EdgeBudgetError(
      `the file-descriptor limit (${fdLimit}) leaves room for ${Math.max(0, room)} edge connections once ${reserve} are kept ` +
        `for the API, the operators' listener and the store: raise it (systemd LimitNOFILE, ulimit -n) or set TPS_EDGE_MAX_CONNECTIONS`,
    );
  }
  return { maxConnections: Math.min(room, MAX_DERIVED), source: 'derived', fdLimit, reserve };
}
