/**
 * What the front end on handles takes from node:http's own `_http_common`: its llhttp parser
 * binding (so that a request means what it means to node:http) and the header checks its
 * `writeHead` runs (so that a header it would refuse is refused here too). One place reaches into
 * it; where any part is missing (another Node), `NODE_HTTP_COMMON` is undefined and every
 * connection goes to node:http.
 */
import { createRequire } from 'node:module';

/** The llhttp parser as node:http drives it; its callbacks sit at numeric keys. */
export interface LlhttpParser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenientFlags: number): void;
  execute(data: Uint8Array): number | Error;
  [callback: number]: unknown;
}

export interface NodeHttpCommon {
  HTTPParser: {
    new (): LlhttpParser;
    REQUEST: number;
    kOnHeaders: number;
    kOnHeadersComplete: number;
    kOnBody: number;
    kOnMessageComplete: number;
    kLenientNone: number;
  };
  /** llhttp's method numbers to names. */
  methods: string[];
  _checkIsHttpToken(name: string): boolean;
  _checkInvalidHeaderChar(value: string): boolean;
}

export const NODE_HTTP_COMMON: NodeHttpCommon | undefined = ((): NodeHttpCommon | undefined => {
  try {
    const common = createRequire(import.meta.url)('_http_common') as Partial<NodeHttpCommon>;
    const parser = common.HTTPParser;
    if (typeof parser !== 'function' || !Array.isArray(common.methods)) return undefined;
    if (typeof common._checkIsHttpToken !== 'function' || typeof common._checkInvalidHeaderChar !== 'function') return undefined;
    for (const key of ['REQUEST', 'kOnHeaders', 'kOnHeadersComplete', 'kOnBody', 'kOnMessageComplete', 'kLenientNone'] as const) {
      if (typeof parser[key] !== 'number') return undefined;
    }
    return common as NodeHttpCommon;
  } catch {
    return undefined;
  }
})();
