/**
 * JSON request bodies as ModSecurity v3.0.9 reads them with yajl 2: a streaming parse that adds
 * one argument per scalar, named from the path ("json.a.b", arrays as "json.a.array_0"),
 * stopping at the first syntax error (arguments seen before it stay), with yajl's lexical rules:
 * whitespace includes \v and \f, strings must be (loosely) valid UTF-8 and free of control
 * characters, \u escapes decode to UTF-8 (yajl's surrogate handling kept), numbers are passed as
 * their text.
 */

export interface JsonSink {
  /** False: the argument was refused (an input limit when `inputLimitExceeded` says so): the parse stops. */
  addArgument(origin: 'JSON', key: string, value: string): boolean;
  /** Input limits of this request (input-limits.ts); absent: only `maxDepth`. */
  readonly inputLimits?: { readonly jsonDepth: number; readonly jsonElements: number } | undefined;
  readonly inputLimitExceeded?: string | undefined;
  exceedInputLimit?(name: 'jsonDepth' | 'jsonElements'): void;
}

export interface JsonResult {
  /** yajl's error text, undefined when the body parsed. */
  readonly error?: string | undefined;
  /** The parse stopped at an input limit (the sink knows which): not an error of the body. */
  readonly limited?: boolean | undefined;
}

interface Container {
  readonly name: string;
  readonly array: boolean;
  counter: number;
  /**
   * The argument path of the containers around this one (fixed while it is open: a parent's
   * counter moves only when this one ends): a value's name is built from it and this container,
   * not from every container again (deep bodies made that quadratic).
   */
  readonly prefix: string;
}

class Stop extends Error {}

function utf8(cp: number): string {
  if (cp < 0x80) return String.fromCharCode(cp);
  if (cp < 0x800) return String.fromCharCode(0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
  if (cp < 0x10000) return String.fromCharCode(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
  if (cp < 0x200000) {
    return String.fromCharCode(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
  }
  return '?';
}

/** A container's part of its values' argument names: "name." or "name.array_N". */
function segment(c: Container): string {
  return c.array ? `${c.name}.array_${c.counter}` : `${c.name}.`;
}

const isHexC = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

export function parseJsonBody(body: string, sink: JsonSink, maxDepth = 10000): JsonResult {
  const s = body;
  const n = s.length;
  let pos = 0;
  const containers: Container[] = [];
  let currentKey = '';
  let depth = 0;
  let depthExceeded = false;
  const limits = sink.inputLimits;
  const depthLimit = limits?.jsonDepth ?? Number.POSITIVE_INFINITY;
  let elementsLeft = limits?.jsonElements ?? Number.POSITIVE_INFINITY;
  let limited = false;
  const overLimit = (name: 'jsonDepth' | 'jsonElements'): never => {
    limited = true;
    sink.exceedInputLimit?.(name);
    throw new Stop('input limit');
  };
  /** One more value (scalar or container) against the elements limit. */
  const element = (): void => {
    if (--elementsLeft < 0) overLimit('jsonElements');
  };

  const getCurrentKey = (): string => {
    if (containers.length === 0) return 'json';
    if (currentKey === '') {
      if (containers[containers.length - 1]!.array) return '';
      return 'empty-key';
    }
    const ret = currentKey;
    currentKey = '';
    return ret;
  };

  const addArgument = (value: string): void => {
    const innermost = containers[containers.length - 1];
    const path = innermost === undefined ? '' : innermost.prefix + segment(innermost);
    let data = '';
    const last = containers[containers.length - 1];
    if (last !== undefined) {
      if (last.array) last.counter++;
      else data = getCurrentKey();
    } else data = getCurrentKey();
    if (!sink.addArgument('JSON', path + data, value)) {
      if (sink.inputLimitExceeded !== undefined) limited = true;
      throw new Stop('client cancelled parse via callback return value');
    }
  };

  const startContainer = (array: boolean): void => {
    element();
    const name = getCurrentKey();
    const parent = containers[containers.length - 1];
    containers.push({ name, array, counter: 0, prefix: parent === undefined ? '' : parent.prefix + segment(parent) });
    depth++;
    if (depth > depthLimit && depth <= maxDepth) overLimit('jsonDepth');
    if (depth > maxDepth) {
      depthExceeded = true;
      throw new Stop('client cancelled parse via callback return value');
    }
  };
  const endContainer = (): void => {
    if (containers.length > 0) {
      containers.pop();
      const last = containers[containers.length - 1];
      if (last?.array) last.counter++;
    }
    depth--;
  };

  const skipWs = (): void => {
    while (pos < n) {
      const c = s.charCodeAt(pos);
      if (c === 0x20 || (c >= 0x09 && c <= 0x0d)) pos++;
      else break;
    }
  };

  const fail = (msg: string): never => {
    throw new Stop(msg);
  };

  const readString = (): string => {
    // s[pos] is the opening quote
    pos++;
    let out = '';
    let start = pos;
    for (;;) {
      if (pos >= n) fail('premature EOF');
      const c = s.charCodeAt(pos);
      if (c === 0x22) {
        out += s.slice(start, pos);
        pos++;
        return out;
      }
      if (c === 0x5c) {
        out += s.slice(start, pos);
        pos++;
        if (pos >= n) fail('premature EOF');
        const e = s[pos]!;
        pos++;
        switch (e) {
          case 'r':
            out += '\r';
            break;
          case 'n':
            out += '\n';
            break;
          case '\\':
            out += '\\';
            break;
          case '/':
            out += '/';
            break;
          case '"':
            out += '"';
            break;
          case 'f':
            out += '\f';
            break;
          case 'b':
            out += '\b';
            break;
          case 't':
            out += '\t';
            break;
          case 'u': {
            for (let k = 0; k < 4; k++) {
              if (pos + k >= n) fail('premature EOF');
              if (!isHexC(s.charCodeAt(pos + k))) fail('invalid (non-hex) character occurs after \\u inside string.');
            }
            let cp = parseInt(s.slice(pos, pos + 4), 16);
            pos += 4;
            if ((cp & 0xfc00) === 0xd800) {
              // yajl: a high surrogate combines with whatever \uXXXX follows; without one it is
              // "?" and the next character is skipped.
              if (s[pos] === '\\' && s[pos + 1] === 'u') {
                let ok = true;
                for (let k = 0; k < 4; k++) if (!isHexC(s.charCodeAt(pos + 2 + k))) ok = false;
                if (!ok) fail('invalid (non-hex) character occurs after \\u inside string.');
                const sur = parseInt(s.slice(pos + 2, pos + 6), 16);
                cp = ((cp & 0x3f) << 10) | ((((cp >> 6) & 0xf) + 1) << 16) | (sur & 0x3ff);
                pos += 6;
              } else {
                // validate the lexer's view first: the skipped char must still be lexically valid
                out += '?';
                if (pos < n && s.charCodeAt(pos) !== 0x22) {
                  const skipped = s.charCodeAt(pos);
                  if (skipped === 0x5c) {
                    // the lexer sees an escape here; yajl's decoder then drops the backslash only
                    pos++;
                  } else pos++;
                  void skipped;
                }
                start = pos;
                continue;
              }
            }
            out += cp === 0 ? '\0' : utf8(cp);
            break;
          }
          default:
            fail('inside a JSON string, a backslash must be followed by one of the allowed escapes.');
        }
        start = pos;
        continue;
      }
      if (c < 0x20) fail('invalid character inside string.');
      if (c >= 0x80) {
        // loose UTF-8 check (lead byte class, continuation bytes 10xxxxxx)
        let need = 0;
        if (c >> 5 === 0x6) need = 1;
        else if (c >> 4 === 0x0e) need = 2;
        else if (c >> 3 === 0x1e) need = 3;
        else fail('invalid bytes in UTF8 string.');
        for (let k = 1; k <= need; k++) {
          if (pos + k >= n) fail('premature EOF');
          if (s.charCodeAt(pos + k) >> 6 !== 0x2) fail('invalid bytes in UTF8 string.');
        }
        pos += need + 1;
        continue;
      }
      pos++;
    }
  };

  const readNumber = (): string => {
    const start = pos;
    if (s[pos] === '-') pos++;
    if (s[pos] === '0') pos++;
    else if (pos < n && s.charCodeAt(pos) >= 0x31 && s.charCodeAt(pos) <= 0x39) {
      while (pos < n && s.charCodeAt(pos) >= 0x30 && s.charCodeAt(pos) <= 0x39) pos++;
    } else fail('malformed number, a digit is required after the minus sign.');
    if (s[pos] === '.') {
      pos++;
      const d = pos;
      while (pos < n && s.charCodeAt(pos) >= 0x30 && s.charCodeAt(pos) <= 0x39) pos++;
      if (pos === d) fail('malformed number, a digit is required after the decimal point.');
    }
    if (s[pos] === 'e' || s[pos] === 'E') {
      pos++;
      if (s[pos] === '+' || s[pos] === '-') pos++;
      const d = pos;
      while (pos < n && s.charCodeAt(pos) >= 0x30 && s.charCodeAt(pos) <= 0x39) pos++;
      if (pos === d) fail('malformed number, a digit is required after the exponent.');
    }
    return s.slice(start, pos);
  };

  const literal = (word: string): void => {
    if (s.startsWith(word, pos)) {
      pos += word.length;
      return;
    }
    // partial literal at EOF is "premature EOF", anything else is invalid
    const rest = s.slice(pos, pos + word.length);
    if (word.startsWith(rest) && pos + rest.length >= n) fail('premature EOF');
    fail('invalid string in json text.');
  };

  const parseValue = (): void => {
    skipWs();
    if (pos >= n) fail('premature EOF');
    const c = s[pos]!;
    switch (c) {
      case '{': {
        pos++;
        startContainer(false);
        skipWs();
        if (s[pos] === '}') {
          pos++;
          endContainer();
          return;
        }
        for (;;) {
          skipWs();
          if (pos >= n) fail('premature EOF');
          if (s[pos] !== '"') fail(s[pos] === '}' ? 'unallowed token at this point in JSON text' : 'invalid object key (must be a string)');
          currentKey = readString();
          skipWs();
          if (pos >= n) fail('premature EOF');
          if (s[pos] !== ':') fail("object key and value must be separated by a colon (':')");
          pos++;
          parseValue();
          skipWs();
          if (pos >= n) fail('premature EOF');
          if (s[pos] === ',') {
            pos++;
            continue;
          }
          if (s[pos] === '}') {
            pos++;
            endContainer();
            return;
          }
          fail("after key and value, inside map, I expect ',' or '}'");
        }
      }
      // fail() throws: no case above falls through.
      case '[': {
        pos++;
        startContainer(true);
        skipWs();
        if (s[pos] === ']') {
          pos++;
          endContainer();
          return;
        }
        for (;;) {
          parseValue();
          skipWs();
          if (pos >= n) fail('premature EOF');
          if (s[pos] === ',') {
            pos++;
            continue;
          }
          if (s[pos] === ']') {
            pos++;
            endContainer();
            return;
          }
          fail("after array element, I expect ',' or ']'");
        }
      }
      // fail() throws: no case above falls through.
      case '"':
        element();
        addArgument(readString());
        return;
      case 't':
        element();
        literal('true');
        addArgument('true');
        return;
      case 'f':
        element();
        literal('false');
        addArgument('false');
        return;
      case 'n':
        element();
        literal('null');
        addArgument('');
        return;
      default:
        if (c === '-' || (c >= '0' && c <= '9')) {
          element();
          addArgument(readNumber());
          return;
        }
        if (c === '/') fail('probable comment found in input text, comments are not enabled.');
        fail('invalid char in json text.');
    }
  };

  try {
    skipWs();
    if (pos >= n) return { error: 'premature EOF' };
    parseValue();
    skipWs();
    if (pos < n) return { error: 'trailing garbage' };
    return {};
  } catch (error) {
    if (error instanceof Stop && limited) return { limited: true };
    if (error instanceof Stop) return { error: error.message + (depthExceeded ? '. Parsing depth limit exceeded' : '') };
    throw error;
  }
}
