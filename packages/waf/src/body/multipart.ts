/**
 * multipart/form-data request bodies as ModSecurity v3.0.9 parses them: the same line-by-line
 * state machine over a 4 KiB line buffer, the same strict-validation flags the CRS checks
 * (MULTIPART_STRICT_ERROR and its parts, MULTIPART_UNMATCHED_BOUNDARY), the same collections
 * (ARGS/ARGS_POST for fields, FILES, FILES_NAMES, FILES_SIZES, FILES_COMBINED_SIZE,
 * MULTIPART_NAME, MULTIPART_FILENAME, MULTIPART_PART_HEADERS).
 *
 * Behaviours of the reference engine kept on purpose because verdicts depend on them:
 * - an error in a part's headers is recorded (REQBODY_ERROR) but does not stop the parser;
 * - the line break between two lines of a field's value is dropped (the value is the lines
 *   joined);
 * - MULTIPART_PART_HEADERS values keep the header line's CRLF;
 * - uploaded file contents are not stored (no upload directory), only their sizes.
 */
import type { TransactionCollections } from '../transaction/collections.ts';
import { newBox } from '../transaction/value-cache.ts';
import type { Entry } from '../transaction/value-cache.ts';

const BUF = 4096;
const FORMDATA = 1;
const FILE = 2;

const isSpace = (c: number): boolean => c === 0x20 || (c >= 0x09 && c <= 0x0d);
const isAlnum = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const isXdigit = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
const MIME_CHARSET_SPECIAL = '!#$%&+-^_`{}~';
const ATTR_CHAR_SPECIAL = '!#$&+-.^_`~';

function isTokenChar(c: number): boolean {
  if (c <= 32 || c >= 127) return false;
  return !'()<>@,;:\\"/[]?='.includes(String.fromCharCode(c));
}

function boundaryCharactersValid(b: string): boolean {
  for (let i = 0; i < b.length; i++) {
    const c = b.charCodeAt(i);
    if (c === 0) return true; // C string ends here
    const ok = isAlnum(c) || (c === 0x20 && i + 1 < b.length && b.charCodeAt(i + 1) !== 0) || "'()+_,-./:=?".includes(b[i]!);
    if (!ok) return false;
  }
  return true;
}

function countBoundaryParams(value: string): number {
  const lower = cstr(value).toLowerCase();
  let count = 0;
  let at = lower.indexOf('boundary');
  while (at >= 0) {
    const after = at + 8;
    if (lower.indexOf('=', after) >= 0) count++;
    at = lower.indexOf('boundary', after);
  }
  return count;
}

/** The C string view of a buffer: up to the first NUL. */
function cstr(s: string): string {
  const nul = s.indexOf('\0');
  return nul < 0 ? s : s.slice(0, nul);
}

/** utils::string::chomp: trailing CR/LF removed, unless the string is only CR/LF. */
function chomp(s: string): string {
  let k = s.length;
  while (k > 0 && (s[k - 1] === '\n' || s[k - 1] === '\r')) k--;
  return k === 0 ? s : s.slice(0, k);
}

class Part {
  type = 0;
  name = '';
  filename = '';
  value = '';
  valueParts: string[] = [];
  /** Header name (as first written) and value; lookups are case-insensitive. */
  headers = new Map<string, { name: string; value: string }>();
  lastHeaderName = '';
  lastHeaderLine = '';
  headerLines: string[] = [];
  fileSize = 0;
}

export interface MultipartResult {
  readonly error?: string | undefined;
  readonly noFilesLength: number;
}

class Multipart {
  private readonly tx: TransactionCollections;
  private readonly header: string;
  boundary = '';
  error: string | undefined;
  noFilesLength = 0;
  private parts: Part[] = [];
  /** Parts ended so far (named or not), against the multipartParts input limit. */
  private partsSeen = 0;
  /** The parse stopped at an input limit: what came before it stays, the rest is not read. */
  limited = false;
  private mpp: Part | undefined;
  private mppState = 0;
  private substatePartDataRead = 0;
  private reserve = '';
  private boundaryCount = 0;
  private bufContainsLine = true;
  private crlfState = 0;
  private crlfStateBufEnd = 0;
  private seenData = false;
  private isComplete = false;
  /** The unprocessed tail of the body (the buffer when the input ended). */
  private leftover = '';
  flagError = false;
  flagDataBefore = false;
  flagDataAfter = false;
  flagHeaderFolding = false;
  flagBoundaryQuoted = false;
  flagLfLine = false;
  flagCrlfLine = false;
  flagUnmatchedBoundary = 0;
  flagBoundaryWhitespace = false;
  flagMissingSemicolon = false;
  flagInvalidQuoting = false;
  flagInvalidPart = false;
  flagInvalidHeaderFolding = false;
  flagFileLimitExceeded = false;

  constructor(tx: TransactionCollections, header: string) {
    this.tx = tx;
    this.header = header;
  }

  init(): boolean {
    const h = this.header;
    if (h === '') {
      this.flagError = true;
      this.error = 'Multipart: Content-Type header not available.';
      return false;
    }
    if (h.length > 1024) {
      this.flagError = true;
      this.error = 'Multipart: Invalid boundary in C-T (length).';
      return false;
    }
    if (h.slice(0, 19).toLowerCase() !== 'multipart/form-data') {
      this.flagError = true;
      this.error = 'Multipart: Invalid MIME type.';
      return false;
    }
    if (countBoundaryParams(h) > 1) {
      this.flagError = true;
      this.error = 'Multipart: Multiple boundary parameters in C-T.';
      return false;
    }
    const hc = cstr(h);
    const at = hc.indexOf('boundary');
    if (at < 0) {
      this.flagError = true;
      this.error =
        countBoundaryParams(h) > 0 ? 'Multipart: Invalid boundary in C-T (case sensitivity).' : 'Multipart: Boundary not found in C-T.';
      return false;
    }
    let seenSemicolon = false;
    for (let p = 19; p < at; p++) {
      const c = hc.charCodeAt(p);
      if (isSpace(c)) continue;
      if (!seenSemicolon && c === 0x3b) seenSemicolon = true;
      else {
        this.flagError = true;
        this.error = 'Multipart: Invalid boundary in C-T (parameter name).';
        return false;
      }
    }
    if (!seenSemicolon) this.flagMissingSemicolon = true;
    const eq = hc.indexOf('=', at + 8);
    if (eq < 0) {
      this.flagError = true;
      this.error = 'Multipart: Invalid boundary in C-T (malformed).';
      return false;
    }
    for (let p = at + 8; p < eq; p++) {
      if (isSpace(hc.charCodeAt(p))) this.flagBoundaryWhitespace = true;
      else {
        this.flagError = true;
        this.error = 'Multipart: Invalid boundary in C-T (parameter name).';
        return false;
      }
    }
    const b = hc.slice(eq + 1);
    const len = b.length;
    if (len > 0 && isSpace(b.charCodeAt(0))) this.flagBoundaryWhitespace = true;
    if (len >= 2 && b[0] === '"' && b[len - 1] === '"') {
      this.boundary = b.slice(1, -1);
      if (this.boundary === '') return false;
      this.flagBoundaryQuoted = true;
    } else {
      if (b[0] === '"' || (len >= 2 && b[len - 1] === '"')) {
        this.flagError = true;
        this.error = 'Multipart: Invalid boundary in C-T (quote).';
        return false;
      }
      this.boundary = b;
      if (this.boundary === '') return false;
      this.flagBoundaryQuoted = false;
    }
    if (countBoundaryParams(this.boundary) !== 0) {
      this.flagError = true;
      this.error = 'Multipart: Invalid boundary in C-T (content).';
      return false;
    }
    if (!boundaryCharactersValid(this.boundary)) {
      const semi = this.boundary.indexOf(';');
      if (semi >= 0) this.boundary = this.boundary.slice(0, semi);
    }
    if (!boundaryCharactersValid(this.boundary)) {
      this.flagError = true;
      this.error = 'Multipart: Invalid boundary in C-T (characters).';
      return false;
    }
    if (this.boundary === '') {
      this.flagError = true;
      this.error = 'Multipart: Invalid boundary in C-T (empty).';
      return false;
    }
    return true;
  }

  process(data: string): boolean {
    if (data.length === 0) return true;
    this.seenData = true;
    if (this.isComplete) {
      this.flagDataBefore = true;
      return true;
    }
    const n = data.length;
    const bnd = this.boundary;
    const blen = bnd.length;
    let i = 0;
    let bufStart = 0;
    let bufLen = 0;
    while (i < n) {
      const c = data.charCodeAt(i);
      let processBuffer = false;
      if (c === 0x0d && BUF - bufLen === 1) processBuffer = true;
      else {
        i++;
        bufLen++;
      }
      if (c === 0x0a || bufLen === BUF || processBuffer) {
        const buf = data.slice(bufStart, bufStart + bufLen);
        const at = (k: number): number => (k < bufLen ? buf.charCodeAt(k) : 0);
        const line = cstr(buf);
        let processedAsBoundary = false;
        if (this.bufContainsLine && line.length > 3 && line[0] === '-' && line[1] === '-') {
          if (line.length >= blen + 2 && line.startsWith(bnd, 2)) {
            if (this.crlfStateBufEnd === 2) this.flagLfLine = true;
            if (this.substatePartDataRead === 0 && this.boundaryCount > 0) {
              this.flagInvalidPart = true;
            } else {
              let end = 2 + blen;
              if (this.boundaryCount > 0) this.flagUnmatchedBoundary = 2;
              let isFinal = false;
              if (at(end) === 0x2d && at(end + 1) === 0x2d) {
                isFinal = true;
                end += 2;
                if (this.isComplete) {
                  this.flagError = true;
                  this.error = 'Multipart: Invalid boundary (final duplicate).';
                  return false;
                }
              }
              if ((at(end) === 0x0d && at(end + 1) === 0x0a && end + 2 >= bufLen) || (at(end) === 0x0a && end + 1 >= bufLen)) {
                if (at(end) === 0x0a) this.flagLfLine = true;
                else this.flagCrlfLine = true;
                this.processBoundary(isFinal);
                if (this.limited) return true;
                if (isFinal) this.isComplete = true;
                processedAsBoundary = true;
                this.boundaryCount++;
              } else {
                this.flagError = true;
                this.error = `Multipart: Invalid boundary: ${line}`;
                return false;
              }
            }
          } else {
            if (this.flagBoundaryQuoted && line.length >= blen + 3 && line[2] === '"' && line.startsWith(bnd, 3)) {
              this.flagError = true;
              this.error = 'Multipart: Invalid boundary (quotes).';
              return false;
            }
            let p = 2;
            while (p < line.length && isSpace(line.charCodeAt(p))) p++;
            if (p !== 2 && line.startsWith(bnd, p)) {
              this.flagError = true;
              this.error = 'Multipart: Invalid boundary (whitespace).';
              return false;
            }
            this.flagUnmatchedBoundary = 1;
          }
        } else if (this.bufContainsLine) {
          for (let k = 0; k < bufLen; k++) {
            if (buf.charCodeAt(k) === 0x2d && k + 1 < bufLen && buf.charCodeAt(k + 1) === 0x2d) {
              if (cstr(buf.slice(k + 2)).startsWith(bnd) || blen === 0) {
                this.flagUnmatchedBoundary = 1;
                break;
              }
            }
          }
        }
        if (!processedAsBoundary) {
          if (this.mpp === undefined) {
            this.flagDataBefore = true;
          } else if (this.mppState === 0) {
            if (bufLen === BUF || processBuffer) {
              this.flagError = true;
              this.error = 'Multipart: Part header line over 4096 bytes long';
              return false;
            }
            this.partHeader(buf);
          } else {
            this.partData(buf);
          }
        }
        bufStart = i;
        bufLen = 0;
        this.bufContainsLine = c === 0x0a;
        if (c === 0x0a) this.crlfState = this.crlfState === 1 ? 3 : 2;
        this.crlfStateBufEnd = this.crlfState;
      }
      if (c === 0x0d) this.crlfState = 1;
      else if (c !== 0x0a) this.crlfState = 0;
      if (this.isComplete && n - i !== 0) {
        this.flagDataAfter = true;
        return true;
      }
    }
    this.leftover = data.slice(bufStart, bufStart + bufLen);
    return true;
  }

  private partHeader(line: string): void {
    const mpp = this.mpp!;
    const len = line.length;
    if (line.indexOf('\0') >= 0) {
      this.error = 'Multipart: Nul byte in part headers.';
      return;
    }
    this.noFilesLength += len;
    let lenWithoutTermination = len - 1;
    if (len > 1) {
      if (line[len - 2] === '\r') {
        this.flagCrlfLine = true;
        lenWithoutTermination--;
      } else this.flagLfLine = true;
    } else this.flagLfLine = true;
    if (line === '\r\n' || line === '\n') {
      if (mpp.lastHeaderLine !== '') {
        mpp.headerLines.push(mpp.lastHeaderLine);
        mpp.lastHeaderLine = '';
      }
      const cd = mpp.headers.get('content-disposition');
      if (!cd) {
        this.error = 'Multipart: Part missing Content-Disposition header.';
        return;
      }
      const rc = this.parseContentDisposition(cd.value);
      if (rc < 0) {
        this.error = `Multipart: Invalid Content-Disposition header (${rc}): ${cd.value}`;
        return;
      }
      if (mpp.name === '') {
        this.error = 'Multipart: Content-Disposition header missing name field.';
        return;
      }
      if (mpp.filename !== '') {
        if (cstr(cd.value).indexOf('filename=') < 0) {
          this.error = 'Multipart: Invalid Content-Disposition header (filename).';
          return;
        }
        mpp.type = FILE;
      } else mpp.type = FORMDATA;
      this.mppState = 1;
      this.substatePartDataRead = 0;
      mpp.lastHeaderName = '';
      return;
    }
    const c0 = line.charCodeAt(0);
    if (isSpace(c0)) {
      this.flagHeaderFolding = true;
      if (c0 !== 0x09 && c0 !== 0x20) this.flagInvalidHeaderFolding = true;
      if (mpp.lastHeaderName === '') {
        this.error = 'Multipart: Invalid part header (folding error).';
        return;
      }
      let k = 0;
      while (k < line.length && isSpace(line.charCodeAt(k))) {
        const c = line.charCodeAt(k);
        if (c !== 0x09 && c !== 0x20) this.flagInvalidHeaderFolding = true;
        k++;
      }
      const h = mpp.headers.get(mpp.lastHeaderName.toLowerCase())!;
      const newValue = `${h.value} ${chomp(line.slice(k))}`;
      h.value = newValue;
      if (newValue.length > BUF) {
        this.error = 'Multipart: Part header too long.';
        return;
      }
      mpp.lastHeaderLine = `${mpp.lastHeaderName}: ${newValue}`;
      return;
    }
    if (mpp.lastHeaderLine !== '') {
      mpp.headerLines.push(mpp.lastHeaderLine);
      mpp.lastHeaderLine = '';
    }
    const colon = line.indexOf(':');
    if (colon < 0) {
      this.error = 'Multipart: Invalid part header (colon missing).';
      return;
    }
    if (colon === 0) {
      this.error = 'Multipart: Invalid part header (header name missing).';
      return;
    }
    const name = line.slice(0, colon);
    let k = colon + 1;
    while (k < line.length && (line[k] === '\t' || line[k] === ' ')) k++;
    const value = chomp(line.slice(k));
    const key = name.toLowerCase();
    if (mpp.headers.has(key)) return;
    mpp.lastHeaderName = name;
    mpp.headers.set(key, { name, value });
    mpp.lastHeaderLine = lenWithoutTermination > 0 ? line : '';
  }

  /** Returns >= 0 when the header was understood, a negative code otherwise (as ModSecurity). */
  private parseContentDisposition(header: string): number {
    const s = cstr(header);
    const mpp = this.mpp!;
    const at = (k: number): number => (k < s.length ? s.charCodeAt(k) : 0);
    if (!s.startsWith('form-data')) return -1;
    let p = 9;
    while (at(p) === 0x09 || at(p) === 0x20) p++;
    if (at(p) === 0) return 1;
    if (at(p) !== 0x3b) return -2;
    p++;
    let filenameStar = '';
    while (at(p) !== 0) {
      while (at(p) === 0x09 || at(p) === 0x20) p++;
      if (at(p) === 0) return -3;
      let start = p;
      while (at(p) !== 0 && at(p) !== 0x3d && at(p) !== 0x09 && at(p) !== 0x20) p++;
      if (at(p) === 0) return -4;
      const name = s.slice(start, p);
      while (at(p) === 0x09 || at(p) === 0x20) p++;
      if (at(p) === 0) return -5;
      if (at(p) !== 0x3d) return -13;
      p++;
      while (at(p) === 0x09 || at(p) === 0x20) p++;
      if (at(p) === 0) return -6;
      let quote = 0;
      let value = '';
      if (name === 'filename*') {
        const startCharset = p;
        while (at(p) !== 0 && (isAlnum(at(p)) || MIME_CHARSET_SPECIAL.includes(s[p]!))) p++;
        if (at(p) !== 0x27 || p === startCharset) return -16;
        p++;
        while (at(p) !== 0 && at(p) !== 0x27) p++;
        if (at(p) !== 0x27) return -17;
        p++;
        const startName = p;
        while (at(p) !== 0 && at(p) !== 0x3b) {
          if (at(p) === 0x25) {
            if (at(p + 1) === 0 || !isXdigit(at(p + 1)) || !isXdigit(at(p + 2))) return -18;
            p += 3;
          } else if (isAlnum(at(p)) || ATTR_CHAR_SPECIAL.includes(s[p]!)) p++;
          else return -19;
        }
        value = s.slice(startName, p);
      } else if (at(p) === 0x22 || at(p) === 0x27) {
        quote = at(p);
        if (quote === 0x27) this.flagInvalidQuoting = true;
        p++;
        if (at(p) === 0) return -7;
        while (at(p) !== 0) {
          if (at(p) === 0x5c) {
            if (at(p + 1) === 0) return -8;
            if (at(p + 1) === quote || at(p + 1) === 0x5c) p++;
          } else if (at(p) === quote) break;
          value += s[p];
          p++;
        }
        if (at(p) === 0) {
          // No closing quote: ModSecurity steps over the string's terminating NUL and reads the
          // byte after it (undefined behaviour; in practice not NUL nor ';'), so the header is
          // rejected with -12 after the name/filename has been recorded.
          if (name === 'filename*') return -12;
          const rc = this.recordValue(name, value, quote);
          return rc < 0 ? rc : -12;
        }
        p++;
      } else {
        start = p;
        while (at(p) !== 0 && isTokenChar(at(p))) p++;
        value = s.slice(start, p);
      }
      if (name === 'filename*') {
        if (filenameStar !== '') return -20;
        filenameStar = value;
      } else {
        const rc = this.recordValue(name, value, quote);
        if (rc < 0) return rc;
      }
      if (at(p) !== 0) {
        while (at(p) === 0x09 || at(p) === 0x20) p++;
        if (at(p) !== 0) {
          if (at(p) !== 0x3b) {
            const prev = at(p - 1);
            if (prev === 0x27 || prev === 0x22) this.flagInvalidQuoting = true;
            return -12;
          }
          p++;
        }
      }
    }
    if (filenameStar !== '' && mpp.filename === '') return -21;
    return 1;
  }

  /** The name= / filename= parameter of a Content-Disposition header. */
  private recordValue(name: string, value: string, quote: number): number {
    const mpp = this.mpp!;
    if (name === 'name') {
      this.validateQuotes(value, quote);
      this.tx.multipartName.push(entry('MULTIPART_NAME', value, value));
      if (mpp.name !== '') return -14;
      mpp.name = value;
      return 0;
    }
    if (name === 'filename') {
      this.validateQuotes(value, quote);
      this.tx.multipartFilename.push(entry('MULTIPART_FILENAME', value, value));
      if (mpp.filename !== '') return -15;
      mpp.filename = value;
      return 0;
    }
    return -11;
  }

  private validateQuotes(value: string, quote: number): void {
    if (quote === 0x22) return;
    if (cstr(value).indexOf("'") >= 0) this.flagInvalidQuoting = true;
  }

  private partData(line: string): void {
    const mpp = this.mpp!;
    this.substatePartDataRead = 1;
    let buf = line;
    let reserved = '';
    if (buf.length >= 1 && buf[buf.length - 1] === '\n') {
      reserved = buf.length >= 2 && buf[buf.length - 2] === '\r' ? '\r\n' : '\n';
      buf = buf.slice(0, buf.length - reserved.length);
    }
    if (mpp.type === FILE) {
      mpp.fileSize += buf.length + this.reserve.length;
    } else if (mpp.type === FORMDATA) {
      this.noFilesLength += buf.length + this.reserve.length;
      // ModSecurity 3.0.9 overwrites the reserved line break with the line itself
      mpp.valueParts.push(buf);
    }
    this.reserve = reserved;
  }

  private processBoundary(last: boolean): void {
    const mpp = this.mpp;
    if (mpp) {
      if (++this.partsSeen > this.tx.inputLimits.multipartParts) {
        this.tx.exceedInputLimit('multipartParts');
        this.limited = true;
        this.mpp = undefined;
        return;
      }
      for (const line of mpp.headerLines) this.tx.multipartPartHeaders.push(entry('MULTIPART_PART_HEADERS', mpp.name, line));
      if (mpp.type !== FILE) mpp.value = mpp.valueParts.join('');
      if (mpp.name !== '') this.parts.push(mpp);
      else this.flagInvalidPart = true;
      this.mpp = undefined;
    }
    if (!last) {
      this.mpp = new Part();
      this.mppState = 0;
      this.substatePartDataRead = 0;
      this.reserve = '';
    }
  }

  complete(): boolean {
    const tx = this.tx;
    const set = (name: string, v: boolean | number): void => tx.setSingle(name, String(typeof v === 'boolean' ? (v ? 1 : 0) : v));
    set('MULTIPART_UNMATCHED_BOUNDARY', this.flagUnmatchedBoundary);
    set('MULTIPART_DATA_BEFORE', this.flagDataBefore);
    set('MULTIPART_DATA_AFTER', this.flagDataAfter);
    set('MULTIPART_BOUNDARY_QUOTED', this.flagBoundaryQuoted);
    set('MULTIPART_BOUNDARY_WHITESPACE', this.flagBoundaryWhitespace);
    set('MULTIPART_HEADER_FOLDING', this.flagHeaderFolding);
    set('MULTIPART_LF_LINE', this.flagLfLine);
    set('MULTIPART_CRLF_LF_LINES', this.flagCrlfLine && this.flagLfLine);
    set('MULTIPART_MISSING_SEMICOLON', this.flagMissingSemicolon);
    set('MULTIPART_INVALID_QUOTING', this.flagInvalidQuoting);
    set('MULTIPART_INVALID_PART', this.flagInvalidPart);
    set('MULTIPART_INVALID_HEADER_FOLDING', this.flagInvalidHeaderFolding);
    set(
      'MULTIPART_STRICT_ERROR',
      this.flagError ||
        this.flagBoundaryQuoted ||
        this.flagBoundaryWhitespace ||
        this.flagDataBefore ||
        this.flagDataAfter ||
        this.flagHeaderFolding ||
        this.flagLfLine ||
        this.flagMissingSemicolon ||
        this.flagInvalidQuoting ||
        this.flagInvalidPart ||
        this.flagInvalidHeaderFolding ||
        this.flagFileLimitExceeded,
    );
    if (this.seenData && !this.isComplete && !this.limited) {
      if (this.boundaryCount > 0) {
        const buf = this.leftover;
        if (this.bufContainsLine) {
          const blen = this.boundary.length;
          const line = cstr(buf);
          if (
            buf.length === 4 + blen &&
            buf[0] === '-' &&
            buf[1] === '-' &&
            line.startsWith(this.boundary, 2) &&
            buf[2 + blen] === '-' &&
            buf[3 + blen] === '-'
          ) {
            if (this.crlfStateBufEnd === 2 && !this.flagLfLine) {
              this.flagLfLine = true;
              set('MULTIPART_LF_LINE', true);
              set('MULTIPART_CRLF_LF_LINES', this.flagCrlfLine && this.flagLfLine);
              set('MULTIPART_STRICT_ERROR', true);
            }
            if (this.substatePartDataRead === 0 && !this.flagInvalidPart) {
              this.flagInvalidPart = true;
              set('MULTIPART_STRICT_ERROR', true);
              set('MULTIPART_INVALID_PART', true);
            }
            this.processBoundary(true);
            this.isComplete = true;
          }
        }
        if (!this.isComplete) {
          this.error = 'Multipart: Final boundary missing.';
          return false;
        }
      } else {
        this.error = 'Multipart: No boundaries found in payload.';
        return false;
      }
    }
    let combined = 0;
    for (const m of this.parts) {
      if (m.name === '') continue;
      if (m.type === FILE) {
        tx.files.push(entry('FILES', m.name, m.filename));
        tx.filesNames.push(entry('FILES_NAMES', m.name, m.name));
        tx.filesSizes.push(entry('FILES_SIZES', m.name, String(m.fileSize)));
        tx.filesTmpContent.push(entry('FILES_TMP_CONTENT', m.name, m.value));
        combined += m.fileSize;
        tx.setSingle('FILES_COMBINED_SIZE', String(combined));
      } else {
        if (!tx.argumentFits(m.name, m.value)) break;
        const box = newBox(m.value);
        tx.args.push({ key: m.name, full: `ARGS:${m.name}`, box, uk: undefined });
        tx.argsPost.push({ key: m.name, full: `ARGS_POST:${m.name}`, box, uk: undefined });
      }
    }
    return true;
  }
}

function entry(collection: string, key: string, value: string): Entry {
  return { key, full: `${collection}:${key}`, box: newBox(value), uk: undefined };
}

/** Runs the multipart processor on a request body (binary string). */
export function parseMultipart(tx: TransactionCollections, contentType: string, body: string): MultipartResult {
  const m = new Multipart(tx, contentType);
  if (m.init()) m.process(body);
  const noFilesLength = m.noFilesLength;
  m.complete();
  return { error: m.error, noFilesLength };
}
