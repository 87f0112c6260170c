/**
 * XML request bodies, for the XML:/* and XML://@* variables, as ModSecurity v3 gets them from
 * libxml2: a non-validating parse; on the first well-formedness error the parse stops, the body
 * is flagged (REQBODY_ERROR) and what was built so far stays queryable (libxml2 keeps the partial
 * tree). XML:/* is the text content of the root element (text and CDATA of all descendants,
 * entities expanded, line ends normalized); XML://@* is every attribute value (normalized), in
 * document order. External entities are never loaded (ModSecurity's default).
 *
 * This is a compact XML 1.0 parser, not libxml2: it checks what matters for verdicts (tags
 * nest and match, attributes are quoted and unique, references are declared, UTF-8 is valid,
 * one root element, nothing but comments/PIs/blanks around it).
 */

export interface XmlDocument {
  readonly rootText: string | undefined;
  readonly attributes: readonly string[];
}

export interface XmlResult {
  readonly document?: XmlDocument | undefined;
  readonly error?: string | undefined;
  /** The parse stopped at `maxDepth` (an input limit): what was built before it stays, no error. */
  readonly limited?: boolean | undefined;
}

class XmlError extends Error {}
class XmlDepthLimit extends Error {}

const NAME_START = /[A-Za-z_:\x80-\xff]/;
const NAME_CHAR = /[A-Za-z0-9_:.\-\x80-\xff]/;

function utf8Encode(cp: number): string {
  if (cp < 0x80) return String.fromCharCode(cp);
  if (cp < 0x800) return String.fromCharCode(0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
  if (cp < 0x10000) return String.fromCharCode(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
  return String.fromCharCode(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
}

/** Checks UTF-8 (well-formed, no overlongs/surrogates) and XML's allowed characters. */
function checkUtf8(s: string): number {
  let i = 0;
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      if (c < 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return i;
      i++;
      continue;
    }
    let need: number;
    let cp: number;
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      need = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3;
      cp = c & 0x07;
    } else return i;
    for (let k = 1; k <= need; k++) {
      const d = s.charCodeAt(i + k);
      if (!(d >= 0x80 && d <= 0xbf)) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (
      (need === 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff) || cp === 0xfffe || cp === 0xffff)) ||
      (need === 3 && (cp < 0x10000 || cp > 0x10ffff))
    )
      return i;
    i += need + 1;
  }
  return -1;
}

/** `maxDepth`: elements nested deeper stop the parse (XmlResult.limited). */
export function parseXml(body: string, maxDepth = Number.POSITIVE_INFINITY): XmlResult {
  let s = body;
  if (s.startsWith('\xef\xbb\xbf')) s = s.slice(3);
  if (s.trim() === '') return { error: 'XML: Failed parsing document.' };
  // line-end normalization, as the parser sees the document
  s = s.replace(/\r\n?/g, '\n');
  const bad = checkUtf8(s);
  // the parse runs up to the first invalid byte; the error is raised there
  const limit = bad < 0 ? s.length : bad;
  const attributes: string[] = [];
  const entities = new Map<string, string>([
    ['lt', '<'],
    ['gt', '>'],
    ['amp', '&'],
    ['quot', '"'],
    ['apos', "'"],
  ]);
  const external = new Set<string>();
  let pos = 0;
  let rootStarted = false;
  let rootText = '';
  let depth = 0;
  const stack: string[] = [];

  const fail = (msg: string): never => {
    throw new XmlError(msg);
  };
  const eof = (): boolean => pos >= limit;
  const peek = (k = 0): string => (pos + k < limit ? s[pos + k]! : '');
  const startsWith = (t: string): boolean => pos + t.length <= limit && s.startsWith(t, pos);
  const skipWs = (): boolean => {
    const start = pos;
    while (pos < limit && (s[pos] === ' ' || s[pos] === '\t' || s[pos] === '\n')) pos++;
    return pos > start;
  };
  const readName = (): string => {
    if (eof() || !NAME_START.test(peek())) fail('name expected');
    const start = pos;
    while (pos < limit && NAME_CHAR.test(s[pos]!)) pos++;
    return s.slice(start, pos);
  };
  const readReference = (inAttribute: boolean): string => {
    // at '&'
    pos++;
    if (peek() === '#') {
      pos++;
      let cp: number;
      if (peek() === 'x') {
        pos++;
        const start = pos;
        while (pos < limit && /[0-9a-fA-F]/.test(s[pos]!)) pos++;
        if (pos === start) fail('bad char ref');
        cp = parseInt(s.slice(start, pos), 16);
      } else {
        const start = pos;
        while (pos < limit && /[0-9]/.test(s[pos]!)) pos++;
        if (pos === start) fail('bad char ref');
        cp = parseInt(s.slice(start, pos), 10);
      }
      if (peek() !== ';') fail('char ref without ;');
      pos++;
      if (
        !(
          cp === 0x9 ||
          cp === 0xa ||
          cp === 0xd ||
          (cp >= 0x20 && cp <= 0xd7ff) ||
          (cp >= 0xe000 && cp <= 0xfffd) ||
          (cp >= 0x10000 && cp <= 0x10ffff)
        )
      ) {
        fail('invalid char ref');
      }
      return utf8Encode(cp);
    }
    const name = readName();
    if (peek() !== ';') fail('entity ref without ;');
    pos++;
    const v = entities.get(name);
    if (v !== undefined) return v;
    if (external.has(name)) {
      if (inAttribute) fail('external entity in attribute');
      return '';
    }
    return fail(`Entity '${name}' not defined`);
  };
  const readAttrValue = (): string => {
    const q = peek();
    if (q !== '"' && q !== "'") fail('attribute value must be quoted');
    pos++;
    let out = '';
    for (;;) {
      if (eof()) fail('unterminated attribute value');
      const c = s[pos]!;
      if (c === q) {
        pos++;
        return out;
      }
      if (c === '<') fail('< in attribute value');
      if (c === '&') {
        out += readReference(true);
        continue;
      }
      out += c === '\t' || c === '\n' ? ' ' : c;
      pos++;
    }
  };
  const skipComment = (): void => {
    // at '<!--'
    const end = s.indexOf('-->', pos + 4);
    if (end < 0 || end + 3 > limit) fail('unterminated comment');
    if (s.slice(pos + 4, end).includes('--')) fail('-- in comment');
    pos = end + 3;
  };
  const skipPi = (): void => {
    const end = s.indexOf('?>', pos + 2);
    if (end < 0 || end + 2 > limit) fail('unterminated processing instruction');
    pos = end + 2;
  };
  const parseDoctype = (): void => {
    pos += 9; // <!DOCTYPE
    if (!skipWs()) fail('space required after DOCTYPE');
    readName();
    skipWs();
    if (startsWith('SYSTEM') || startsWith('PUBLIC')) {
      const pub = startsWith('PUBLIC');
      pos += 6;
      skipWs();
      readQuoted();
      if (pub) {
        skipWs();
        readQuoted();
      }
      skipWs();
    }
    if (peek() === '[') {
      pos++;
      for (;;) {
        skipWs();
        if (eof()) fail('unterminated internal subset');
        if (peek() === ']') {
          pos++;
          break;
        }
        if (startsWith('<!--')) skipComment();
        else if (startsWith('<?')) skipPi();
        else if (startsWith('<!ENTITY')) {
          pos += 8;
          if (!skipWs()) fail('space required after ENTITY');
          let parameter = false;
          if (peek() === '%') {
            parameter = true;
            pos++;
            skipWs();
          }
          const name = readName();
          skipWs();
          if (startsWith('SYSTEM') || startsWith('PUBLIC')) {
            const pub = startsWith('PUBLIC');
            pos += 6;
            skipWs();
            readQuoted();
            if (pub) {
              skipWs();
              readQuoted();
            }
            skipWs();
            if (startsWith('NDATA')) {
              pos += 5;
              skipWs();
              readName();
              skipWs();
            }
            if (!parameter && !entities.has(name)) external.add(name);
          } else {
            const value = readQuoted();
            if (!parameter && !entities.has(name))
              entities.set(
                name,
                value.replace(/&#x([0-9a-fA-F]+);|&#([0-9]+);/g, (_m, h: string, d: string) =>
                  utf8Encode(h ? parseInt(h, 16) : parseInt(d, 10)),
                ),
              );
          }
          if (peek() !== '>') fail('> expected in ENTITY');
          pos++;
        } else if (startsWith('<!')) {
          // ELEMENT, ATTLIST, NOTATION: skip to the closing '>' outside quotes
          pos += 2;
          let q = '';
          while (!eof()) {
            const c = s[pos]!;
            pos++;
            if (q) {
              if (c === q) q = '';
            } else if (c === '"' || c === "'") q = c;
            else if (c === '>') break;
          }
        } else if (peek() === '%') {
          pos++;
          readName();
          if (peek() !== ';') fail('bad parameter entity reference');
          pos++;
        } else fail('bad internal subset');
      }
      skipWs();
    }
    if (peek() !== '>') fail('> expected after DOCTYPE');
    pos++;
  };
  const readQuoted = (): string => {
    const q = peek();
    if (q !== '"' && q !== "'") fail('quoted string expected');
    const end = s.indexOf(q, pos + 1);
    if (end < 0 || end >= limit) fail('unterminated quoted string');
    const v = s.slice(pos + 1, end);
    pos = end + 1;
    return v;
  };

  const misc = (allowDoctype: boolean): boolean => {
    // returns false when at something else
    skipWs();
    if (startsWith('<!--')) {
      skipComment();
      return true;
    }
    if (startsWith('<?')) {
      if (/^<\?xml[\s?]/i.test(s.slice(pos, pos + 6))) fail('XML declaration allowed only at the start of the document');
      skipPi();
      return true;
    }
    if (allowDoctype && startsWith('<!DOCTYPE')) {
      parseDoctype();
      return true;
    }
    return false;
  };

  let error: string | undefined;
  try {
    if (startsWith('<?xml') && /^<\?xml[\s?]/.test(s.slice(pos, pos + 6))) {
      const end = s.indexOf('?>', pos);
      if (end < 0) fail('unterminated XML declaration');
      const decl = s.slice(pos, end);
      if (!/^<\?xml\s+version\s*=\s*(["'])1\.[0-9]+\1/.test(decl)) fail('malformed XML declaration');
      pos = end + 2;
    }
    let seenDoctype = false;
    for (;;) {
      const before = pos;
      if (!misc(!seenDoctype)) break;
      if (s.startsWith('<!DOCTYPE', before)) seenDoctype = true;
    }
    if (peek() !== '<' || !NAME_START.test(peek(1))) fail('Start tag expected');
    // elements
    for (;;) {
      if (eof()) {
        if (depth > 0) fail('Premature end of data');
        break;
      }
      const c = s[pos]!;
      if (c === '<') {
        if (startsWith('</')) {
          pos += 2;
          const name = readName();
          skipWs();
          if (peek() !== '>') fail('> expected');
          pos++;
          if (stack.pop() !== name) fail('Opening and ending tag mismatch');
          depth--;
          if (depth === 0) break;
          continue;
        }
        if (startsWith('<!--')) {
          if (depth === 0) fail('content outside the root');
          skipComment();
          continue;
        }
        if (startsWith('<![CDATA[')) {
          if (depth === 0) fail('content outside the root');
          const end = s.indexOf(']]>', pos + 9);
          if (end < 0 || end + 3 > limit) fail('unterminated CDATA');
          rootText += s.slice(pos + 9, end);
          pos = end + 3;
          continue;
        }
        if (startsWith('<?')) {
          skipPi();
          continue;
        }
        pos++;
        const name = readName();
        const seen = new Set<string>();
        for (;;) {
          const ws = skipWs();
          if (peek() === '/' || peek() === '>') break;
          if (!ws) fail('attributes construct error');
          const attr = readName();
          skipWs();
          if (peek() !== '=') fail('Specification mandates value for attribute');
          pos++;
          skipWs();
          const value = readAttrValue();
          if (seen.has(attr)) fail('Attribute redefined');
          seen.add(attr);
          // namespace declarations are not attribute nodes for XPath
          if (attr !== 'xmlns' && !attr.startsWith('xmlns:')) attributes.push(value);
        }
        rootStarted = true;
        if (peek() === '/') {
          pos++;
          if (peek() !== '>') fail("expected '>'");
          pos++;
          if (depth === 0) break;
          continue;
        }
        pos++;
        stack.push(name);
        depth++;
        if (depth > maxDepth) throw new XmlDepthLimit();
        continue;
      }
      if (depth === 0) fail('Extra content at the end of the document');
      if (c === '&') {
        rootText += readReference(false);
        continue;
      }
      if (c === ']' && startsWith(']]>')) fail("Sequence ']]>' not allowed in content");
      const next = s.indexOf('<', pos);
      const amp = s.indexOf('&', pos);
      let end = next < 0 ? limit : Math.min(next, limit);
      if (amp >= 0 && amp < end) end = amp;
      const text = s.slice(pos, end);
      if (text.includes(']]>')) fail("Sequence ']]>' not allowed in content");
      rootText += text;
      pos = end;
    }
    // trailing misc
    while (misc(false)) {
      /* comments, PIs, blanks */
    }
    skipWs();
    if (!eof()) fail('Extra content at the end of the document');
    if (bad >= 0) fail('Input is not proper UTF-8');
  } catch (e) {
    if (e instanceof XmlDepthLimit) return { document: { rootText: rootText, attributes }, limited: true };
    if (!(e instanceof XmlError)) throw e;
    error = 'XML: Failed parsing document.';
  }
  return {
    document: { rootText: rootStarted ? rootText : undefined, attributes },
    ...(error !== undefined ? { error } : {}),
  };
}
