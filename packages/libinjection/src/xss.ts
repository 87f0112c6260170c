/**
 * XSS detection with libinjection's algorithm (as bundled in ModSecurity 3.0.9): tokenize the
 * input as HTML5 from five starting states (text, unquoted / single / double / back-quoted
 * attribute value) and flag a doctype, a dangerous tag, an event-handler or style attribute, a
 * URL attribute whose value starts with javascript:/vbscript:/data:/view-source: (HTML entities
 * decoded), and IE-specific comment tricks.
 *
 * Written here from the published algorithm; the C code's byte quirks that change results are
 * kept (NUL counts as whitespace in most states, a 0xFF byte looks like end of input where
 * whitespace is skipped, entity decoding may read past the token).
 */

const DATA_TEXT = 0;
const TAG_NAME_OPEN = 1;
const TAG_NAME_CLOSE = 2;
const TAG_NAME_SELFCLOSE = 3;
const TAG_CLOSE = 5;
const ATTR_NAME = 6;
const ATTR_VALUE = 7;
const TAG_COMMENT = 8;
const DOCTYPE = 9;

const START_DATA = 0;
const START_VALUE_NO_QUOTE = 1;
const START_VALUE_SINGLE_QUOTE = 2;
const START_VALUE_DOUBLE_QUOTE = 3;
const START_VALUE_BACK_QUOTE = 4;

const EOF = -1;

type StateFn = (h: H5) => boolean;

/** strchr(" \t\n\v\f\r", ch): also true for NUL (the terminator). */
function isWhite(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d) || c === 0;
}

class H5 {
  s = '';
  len = 0;
  pos = 0;
  isClose = false;
  state: StateFn = stateEof;
  tokenStart = 0;
  tokenLen = 0;
  tokenType = DATA_TEXT;

  init(s: string, start: number): void {
    this.s = s;
    this.len = s.length;
    this.pos = 0;
    this.isClose = false;
    this.tokenStart = 0;
    this.tokenLen = 0;
    this.tokenType = DATA_TEXT;
    switch (start) {
      case START_DATA:
        this.state = stateData;
        break;
      case START_VALUE_NO_QUOTE:
        this.state = stateBeforeAttributeName;
        break;
      case START_VALUE_SINGLE_QUOTE:
        this.state = (h) => stateAttributeValueQuote(h, 0x27);
        break;
      case START_VALUE_DOUBLE_QUOTE:
        this.state = (h) => stateAttributeValueQuote(h, 0x22);
        break;
      default:
        this.state = (h) => stateAttributeValueQuote(h, 0x60);
    }
  }

  next(): boolean {
    return this.state(this);
  }

  c(i: number): number {
    return i < this.len ? this.s.charCodeAt(i) : 0;
  }
}

/** h5_skip_white: returns the first non-white byte as a signed char (0xFF reads as EOF), or EOF. */
function skipWhite(h: H5): number {
  while (h.pos < h.len) {
    const c = h.s.charCodeAt(h.pos);
    if (c === 0 || c === 0x20 || (c >= 0x09 && c <= 0x0d)) {
      h.pos += 1;
      continue;
    }
    return c >= 0x80 ? c - 0x100 : c;
  }
  return EOF;
}

function stateEof(_h: H5): boolean {
  return false;
}

function stateData(h: H5): boolean {
  let idx = h.s.indexOf('<', h.pos);
  if (idx >= h.len) idx = -1;
  if (idx < 0) {
    h.tokenStart = h.pos;
    h.tokenLen = h.len - h.pos;
    h.tokenType = DATA_TEXT;
    h.state = stateEof;
    if (h.tokenLen === 0) return false;
  } else {
    h.tokenStart = h.pos;
    h.tokenType = DATA_TEXT;
    h.tokenLen = idx - h.pos;
    h.pos = idx + 1;
    h.state = stateTagOpen;
    if (h.tokenLen === 0) return stateTagOpen(h);
  }
  return true;
}

function isAlpha(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a);
}

function stateTagOpen(h: H5): boolean {
  if (h.pos >= h.len) return false;
  const c = h.s.charCodeAt(h.pos);
  if (c === 0x21) {
    h.pos += 1;
    return stateMarkupDeclarationOpen(h);
  } else if (c === 0x2f) {
    h.pos += 1;
    h.isClose = true;
    return stateEndTagOpen(h);
  } else if (c === 0x3f) {
    h.pos += 1;
    return stateBogusComment(h);
  } else if (c === 0x25) {
    h.pos += 1;
    return stateBogusComment2(h);
  } else if (isAlpha(c)) {
    return stateTagName(h);
  } else if (c === 0) {
    return stateTagName(h);
  }
  if (h.pos === 0) return stateData(h);
  h.tokenStart = h.pos - 1;
  h.tokenLen = 1;
  h.tokenType = DATA_TEXT;
  h.state = stateData;
  return true;
}

function stateEndTagOpen(h: H5): boolean {
  if (h.pos >= h.len) return false;
  const c = h.s.charCodeAt(h.pos);
  if (c === 0x3e) return stateData(h);
  if (isAlpha(c)) return stateTagName(h);
  h.isClose = false;
  return stateBogusComment(h);
}

function stateTagNameClose(h: H5): boolean {
  h.isClose = false;
  h.tokenStart = h.pos;
  h.tokenLen = 1;
  h.tokenType = TAG_NAME_CLOSE;
  h.pos += 1;
  h.state = h.pos < h.len ? stateData : stateEof;
  return true;
}

function stateTagName(h: H5): boolean {
  let pos = h.pos;
  while (pos < h.len) {
    const c = h.s.charCodeAt(pos);
    if (c === 0) {
      pos += 1;
    } else if (isWhite(c)) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.tokenType = TAG_NAME_OPEN;
      h.pos = pos + 1;
      h.state = stateBeforeAttributeName;
      return true;
    } else if (c === 0x2f) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.tokenType = TAG_NAME_OPEN;
      h.pos = pos + 1;
      h.state = stateSelfClosingStartTag;
      return true;
    } else if (c === 0x3e) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      if (h.isClose) {
        h.pos = pos + 1;
        h.isClose = false;
        h.tokenType = TAG_CLOSE;
        h.state = stateData;
      } else {
        h.pos = pos;
        h.tokenType = TAG_NAME_OPEN;
        h.state = stateTagNameClose;
      }
      return true;
    } else pos += 1;
  }
  h.tokenStart = h.pos;
  h.tokenLen = h.len - h.pos;
  h.tokenType = TAG_NAME_OPEN;
  h.state = stateEof;
  return true;
}

function stateBeforeAttributeName(h: H5): boolean {
  const c = skipWhite(h);
  switch (c) {
    case EOF:
      return false;
    case 0x2f:
      h.pos += 1;
      return stateSelfClosingStartTag(h);
    case 0x3e:
      h.state = stateData;
      h.tokenStart = h.pos;
      h.tokenLen = 1;
      h.tokenType = TAG_NAME_CLOSE;
      h.pos += 1;
      return true;
    default:
      return stateAttributeName(h);
  }
}

function stateAttributeName(h: H5): boolean {
  let pos = h.pos + 1;
  while (pos < h.len) {
    const c = h.s.charCodeAt(pos);
    if (isWhite(c)) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.tokenType = ATTR_NAME;
      h.state = stateAfterAttributeName;
      h.pos = pos + 1;
      return true;
    } else if (c === 0x2f) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.tokenType = ATTR_NAME;
      h.state = stateSelfClosingStartTag;
      h.pos = pos + 1;
      return true;
    } else if (c === 0x3d) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.tokenType = ATTR_NAME;
      h.state = stateBeforeAttributeValue;
      h.pos = pos + 1;
      return true;
    } else if (c === 0x3e) {
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.tokenType = ATTR_NAME;
      h.state = stateTagNameClose;
      h.pos = pos;
      return true;
    } else pos += 1;
  }
  h.tokenStart = h.pos;
  h.tokenLen = h.len - h.pos;
  h.tokenType = ATTR_NAME;
  h.state = stateEof;
  h.pos = h.len;
  return true;
}

function stateAfterAttributeName(h: H5): boolean {
  const c = skipWhite(h);
  switch (c) {
    case EOF:
      return false;
    case 0x2f:
      h.pos += 1;
      return stateSelfClosingStartTag(h);
    case 0x3d:
      h.pos += 1;
      return stateBeforeAttributeValue(h);
    case 0x3e:
      return stateTagNameClose(h);
    default:
      return stateAttributeName(h);
  }
}

function stateBeforeAttributeValue(h: H5): boolean {
  const c = skipWhite(h);
  if (c === EOF) {
    h.state = stateEof;
    return false;
  }
  if (c === 0x22) return stateAttributeValueQuote(h, 0x22);
  if (c === 0x27) return stateAttributeValueQuote(h, 0x27);
  if (c === 0x60) return stateAttributeValueQuote(h, 0x60);
  return stateAttributeValueNoQuote(h);
}

function stateAttributeValueQuote(h: H5, q: number): boolean {
  if (h.pos > 0) h.pos += 1;
  let idx = h.pos < h.len ? h.s.indexOf(String.fromCharCode(q), h.pos) : -1;
  if (idx >= h.len) idx = -1;
  if (idx < 0) {
    h.tokenStart = h.pos;
    h.tokenLen = h.len - h.pos;
    h.tokenType = ATTR_VALUE;
    h.state = stateEof;
  } else {
    h.tokenStart = h.pos;
    h.tokenLen = idx - h.pos;
    h.tokenType = ATTR_VALUE;
    h.state = stateAfterAttributeValueQuoted;
    h.pos += h.tokenLen + 1;
  }
  return true;
}

function stateAttributeValueNoQuote(h: H5): boolean {
  let pos = h.pos;
  while (pos < h.len) {
    const c = h.s.charCodeAt(pos);
    if (isWhite(c)) {
      h.tokenType = ATTR_VALUE;
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.pos = pos + 1;
      h.state = stateBeforeAttributeName;
      return true;
    } else if (c === 0x3e) {
      h.tokenType = ATTR_VALUE;
      h.tokenStart = h.pos;
      h.tokenLen = pos - h.pos;
      h.pos = pos;
      h.state = stateTagNameClose;
      return true;
    }
    pos += 1;
  }
  h.state = stateEof;
  h.tokenStart = h.pos;
  h.tokenLen = h.len - h.pos;
  h.tokenType = ATTR_VALUE;
  return true;
}

function stateAfterAttributeValueQuoted(h: H5): boolean {
  if (h.pos >= h.len) return false;
  const c = h.s.charCodeAt(h.pos);
  if (isWhite(c)) {
    h.pos += 1;
    return stateBeforeAttributeName(h);
  } else if (c === 0x2f) {
    h.pos += 1;
    return stateSelfClosingStartTag(h);
  } else if (c === 0x3e) {
    h.tokenStart = h.pos;
    h.tokenLen = 1;
    h.tokenType = TAG_NAME_CLOSE;
    h.pos += 1;
    h.state = stateData;
    return true;
  }
  return stateBeforeAttributeName(h);
}

function stateSelfClosingStartTag(h: H5): boolean {
  if (h.pos >= h.len) return false;
  const c = h.s.charCodeAt(h.pos);
  if (c === 0x3e) {
    h.tokenStart = h.pos - 1;
    h.tokenLen = 2;
    h.tokenType = TAG_NAME_SELFCLOSE;
    h.state = stateData;
    h.pos += 1;
    return true;
  }
  return stateBeforeAttributeName(h);
}

function stateBogusComment(h: H5): boolean {
  let idx = h.pos < h.len ? h.s.indexOf('>', h.pos) : -1;
  if (idx >= h.len) idx = -1;
  if (idx < 0) {
    h.tokenStart = h.pos;
    h.tokenLen = h.len - h.pos;
    h.pos = h.len;
    h.state = stateEof;
  } else {
    h.tokenStart = h.pos;
    h.tokenLen = idx - h.pos;
    h.pos = idx + 1;
    h.state = stateData;
  }
  h.tokenType = TAG_COMMENT;
  return true;
}

function stateBogusComment2(h: H5): boolean {
  let pos = h.pos;
  for (;;) {
    let idx = pos < h.len ? h.s.indexOf('%', pos) : -1;
    if (idx >= h.len) idx = -1;
    if (idx < 0 || idx + 1 >= h.len) {
      h.tokenStart = h.pos;
      h.tokenLen = h.len - h.pos;
      h.pos = h.len;
      h.tokenType = TAG_COMMENT;
      h.state = stateEof;
      return true;
    }
    if (h.s.charCodeAt(idx + 1) !== 0x3e) {
      pos = idx + 1;
      continue;
    }
    h.tokenStart = h.pos;
    h.tokenLen = idx - h.pos;
    h.pos = idx + 2;
    h.state = stateData;
    h.tokenType = TAG_COMMENT;
    return true;
  }
}

function stateMarkupDeclarationOpen(h: H5): boolean {
  const remaining = h.len - h.pos;
  const s = h.s;
  const p = h.pos;
  if (remaining >= 7 && s.substr(p, 7).toUpperCase() === 'DOCTYPE' && /^[A-Za-z]{7}$/.test(s.substr(p, 7))) return stateDoctype(h);
  if (remaining >= 7 && s.substr(p, 7) === '[CDATA[') {
    h.pos += 7;
    return stateCdata(h);
  }
  if (remaining >= 2 && s[p] === '-' && s[p + 1] === '-') {
    h.pos += 2;
    return stateComment(h);
  }
  return stateBogusComment(h);
}

function stateComment(h: H5): boolean {
  const end = h.len;
  let pos = h.pos;
  const eof = (): boolean => {
    h.state = stateEof;
    h.tokenStart = h.pos;
    h.tokenLen = h.len - h.pos;
    h.tokenType = TAG_COMMENT;
    return true;
  };
  for (;;) {
    let idx = pos < h.len ? h.s.indexOf('-', pos) : -1;
    if (idx >= h.len) idx = -1;
    if (idx < 0 || idx > h.len - 3) return eof();
    let offset = 1;
    while (idx + offset < end && h.s.charCodeAt(idx + offset) === 0) offset += 1;
    if (idx + offset === end) return eof();
    let c = h.s.charCodeAt(idx + offset);
    if (c !== 0x2d && c !== 0x21) {
      pos = idx + 1;
      continue;
    }
    offset += 1;
    if (idx + offset === end) return eof();
    c = h.s.charCodeAt(idx + offset);
    if (c !== 0x3e) {
      pos = idx + 1;
      continue;
    }
    offset += 1;
    h.tokenStart = h.pos;
    h.tokenLen = idx - h.pos;
    h.pos = idx + offset;
    h.state = stateData;
    h.tokenType = TAG_COMMENT;
    return true;
  }
}

function stateCdata(h: H5): boolean {
  let pos = h.pos;
  for (;;) {
    let idx = pos < h.len ? h.s.indexOf(']', pos) : -1;
    if (idx >= h.len) idx = -1;
    if (idx < 0 || idx > h.len - 3) {
      h.state = stateEof;
      h.tokenStart = h.pos;
      h.tokenLen = h.len - h.pos;
      h.tokenType = DATA_TEXT;
      return true;
    }
    if (h.s.charCodeAt(idx + 1) === 0x5d && h.s.charCodeAt(idx + 2) === 0x3e) {
      h.state = stateData;
      h.tokenStart = h.pos;
      h.tokenLen = idx - h.pos;
      h.pos = idx + 3;
      h.tokenType = DATA_TEXT;
      return true;
    }
    pos = idx + 1;
  }
}

function stateDoctype(h: H5): boolean {
  h.tokenStart = h.pos;
  h.tokenType = DOCTYPE;
  let idx = h.pos < h.len ? h.s.indexOf('>', h.pos) : -1;
  if (idx >= h.len) idx = -1;
  if (idx < 0) {
    h.state = stateEof;
    h.tokenLen = h.len - h.pos;
  } else {
    h.state = stateData;
    h.tokenLen = idx - h.pos;
    h.pos = idx + 1;
  }
  return true;
}

// ------------------------------------------------------------------ the XSS checks

const HEX = (c: number): number => {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  return 256;
};

/**
 * html_decode_char_at over the whole input `s` from `at`, limited to `len` bytes (it may read one
 * or two bytes past them, as the C code does; past the input it reads NUL).
 */
function decodeCharAt(s: string, at: number, len: number): { ch: number; consumed: number } {
  const byte = (k: number): number => (at + k < s.length ? s.charCodeAt(at + k) : 0);
  if (len === 0) return { ch: -1, consumed: 0 };
  if (byte(0) !== 0x26 || len < 2) return { ch: byte(0), consumed: 1 };
  if (byte(1) !== 0x23) return { ch: 0x26, consumed: 1 };
  if (byte(2) === 0x78 || byte(2) === 0x58) {
    let ch = HEX(byte(3));
    if (ch === 256) return { ch: 0x26, consumed: 1 };
    let val = ch;
    let i = 4;
    while (i < len) {
      const c = byte(i);
      if (c === 0x3b) return { ch: val, consumed: i + 1 };
      ch = HEX(c);
      if (ch === 256) return { ch: val, consumed: i };
      val = val * 16 + ch;
      if (val > 0x1000ff) return { ch: 0x26, consumed: 1 };
      i++;
    }
    return { ch: val, consumed: i };
  }
  let i = 2;
  let c = byte(i);
  if (c < 0x30 || c > 0x39) return { ch: 0x26, consumed: 1 };
  let val = c - 0x30;
  i += 1;
  while (i < len) {
    c = byte(i);
    if (c === 0x3b) return { ch: val, consumed: i + 1 };
    if (c < 0x30 || c > 0x39) return { ch: val, consumed: i };
    val = val * 10 + (c - 0x30);
    if (val > 0x1000ff) return { ch: 0x26, consumed: 1 };
    i++;
  }
  return { ch: val, consumed: i };
}

/** htmlencode_startswith: does the entity-decoded text start with `prefix` (upper case)? */
function htmlStartsWith(prefix: string, s: string, at: number, n: number): boolean {
  let k = 0;
  let first = true;
  let p = at;
  let left = n;
  while (left > 0) {
    if (k === prefix.length) return true;
    const { ch, consumed } = decodeCharAt(s, p, left);
    p += consumed;
    left -= consumed;
    let cb = ch;
    if (first && cb <= 32) continue;
    first = false;
    if (cb === 0) continue;
    if (cb === 10) continue;
    if (cb >= 0x61 && cb <= 0x7a) cb -= 0x20;
    // (char) cb: compare the low byte as the C code does
    if (prefix.charCodeAt(k) !== (cb & 0xff)) return false;
    k++;
  }
  return k === prefix.length;
}

/** cstrcasecmp_with_null(UPPER, token): NULs in the token are skipped. */
function ieqSkipNull(upper: string, s: string, at: number, n: number): boolean {
  let k = 0;
  for (let i = 0; i < n; i++) {
    let cb = s.charCodeAt(at + i);
    if (cb === 0) continue;
    if (cb >= 0x61 && cb <= 0x7a) cb -= 0x20;
    if (k >= upper.length || upper.charCodeAt(k) !== cb) return false;
    k++;
  }
  return k === upper.length;
}

const BLACK_TAGS = [
  'APPLET',
  'BASE',
  'COMMENT',
  'EMBED',
  'FRAME',
  'FRAMESET',
  'HANDLER',
  'IFRAME',
  'IMPORT',
  'ISINDEX',
  'LINK',
  'LISTENER',
  'META',
  'NOSCRIPT',
  'OBJECT',
  'SCRIPT',
  'STYLE',
  'VMLFRAME',
  'XML',
  'XSS',
];

const A_NONE = 0;
const A_BLACK = 1;
const A_URL = 2;
const A_STYLE = 3;
const A_INDIRECT = 4;

const BLACK_ATTRS: [string, number][] = [
  ['ACTION', A_URL],
  ['ATTRIBUTENAME', A_INDIRECT],
  ['BY', A_URL],
  ['BACKGROUND', A_URL],
  ['DATAFORMATAS', A_BLACK],
  ['DATASRC', A_BLACK],
  ['DYNSRC', A_URL],
  ['FILTER', A_STYLE],
  ['FORMACTION', A_URL],
  ['FOLDER', A_URL],
  ['FROM', A_URL],
  ['HANDLER', A_URL],
  ['HREF', A_URL],
  ['LOWSRC', A_URL],
  ['POSTER', A_URL],
  ['SRC', A_URL],
  ['STYLE', A_STYLE],
  ['TO', A_URL],
  ['VALUES', A_URL],
  ['XLINK:HREF', A_URL],
];

function isBlackTag(s: string, at: number, len: number): boolean {
  if (len < 3) return false;
  for (const t of BLACK_TAGS) if (ieqSkipNull(t, s, at, len)) return true;
  const c0 = s.charCodeAt(at) | 0x20;
  const c1 = s.charCodeAt(at + 1) | 0x20;
  const c2 = s.charCodeAt(at + 2) | 0x20;
  if (c0 === 0x73 && c1 === 0x76 && c2 === 0x67) return true; // svg*
  if (c0 === 0x78 && c1 === 0x73 && c2 === 0x6c) return true; // xsl*
  return false;
}

function blackAttr(s: string, at: number, len: number): number {
  if (len < 2) return A_NONE;
  if (len >= 5) {
    const c0 = s.charCodeAt(at) | 0x20;
    const c1 = s.charCodeAt(at + 1) | 0x20;
    if (c0 === 0x6f && c1 === 0x6e) return A_BLACK; // on*
    if (ieqSkipNull('XMLNS', s, at, 5) || ieqSkipNull('XLINK', s, at, 5)) return A_BLACK;
  }
  for (const [name, type] of BLACK_ATTRS) if (ieqSkipNull(name, s, at, len)) return type;
  return A_NONE;
}

function isBlackUrl(s: string, at: number, len: number): boolean {
  let p = at;
  let n = len;
  // skip blanks, control and high-bit bytes (signed char <= 32 or == 127)
  while (n > 0) {
    const c = s.charCodeAt(p);
    if (c <= 32 || c >= 127) {
      p++;
      n--;
    } else break;
  }
  return (
    htmlStartsWith('DATA', s, p, n) ||
    htmlStartsWith('VIEW-SOURCE', s, p, n) ||
    htmlStartsWith('JAVA', s, p, n) ||
    htmlStartsWith('VBSCRIPT', s, p, n)
  );
}

const h5 = new H5();

function isXss(s: string, start: number): boolean {
  h5.init(s, start);
  let attr = A_NONE;
  while (h5.next()) {
    const type = h5.tokenType;
    const at = h5.tokenStart;
    const len = h5.tokenLen;
    if (type !== ATTR_VALUE) attr = A_NONE;
    if (type === DOCTYPE) return true;
    if (type === TAG_NAME_OPEN) {
      if (isBlackTag(s, at, len)) return true;
    } else if (type === ATTR_NAME) {
      attr = blackAttr(s, at, len);
    } else if (type === ATTR_VALUE) {
      switch (attr) {
        case A_BLACK:
        case A_STYLE:
          return true;
        case A_URL:
          if (isBlackUrl(s, at, len)) return true;
          break;
        case A_INDIRECT:
          if (blackAttr(s, at, len) !== A_NONE) return true;
          break;
      }
      attr = A_NONE;
    } else if (type === TAG_COMMENT) {
      const text = s.substr(at, len);
      if (text.indexOf('`') >= 0) return true;
      if (len > 3) {
        const c0 = text.charCodeAt(0);
        const c1 = text.charCodeAt(1) | 0x20;
        const c2 = text.charCodeAt(2) | 0x20;
        if (c0 === 0x5b && c1 === 0x69 && c2 === 0x66) return true; // [if
        if ((c0 | 0x20) === 0x78 && c1 === 0x6d && c2 === 0x6c) return true; // xml
      }
      if (len > 5) {
        if (ieqSkipNull('IMPORT', s, at, 6) || ieqSkipNull('ENTITY', s, at, 6)) return true;
      }
    }
  }
  return false;
}

/** libinjection_xss: true when the input looks like XSS in any of the five contexts. */
export function detectXss(input: string): boolean {
  // Every token that can make an input XSS needs a '<' (a tag, a comment, a doctype) or an '='
  // (an attribute's value: the tokenizer reaches a value only through '='; the quoted contexts
  // start with a value, but no attribute name precedes it). Most benign values have neither.
  if (input.indexOf('<') < 0 && input.indexOf('=') < 0) return false;
  return tokenizesAsXss(input);
}

/** detectXss without its shortcut (tests compare the two). */
export function tokenizesAsXss(input: string): boolean {
  return (
    isXss(input, START_DATA) ||
    isXss(input, START_VALUE_NO_QUOTE) ||
    isXss(input, START_VALUE_SINGLE_QUOTE) ||
    isXss(input, START_VALUE_DOUBLE_QUOTE) ||
    isXss(input, START_VALUE_BACK_QUOTE)
  );
}
