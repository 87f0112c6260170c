/**
 * Which heads the handle front end serves (front-end.ts): decided by its request line, llhttp's
 * strict reading, and the fields llhttp read (`isSimpleFieldList`). Checked against what it
 * replaced, kept here as the oracle: regular expressions over the head's text for the Host, the
 * fields that make a request more than a head, and a bare CR or LF. On generated heads mixing
 * those fields, odd names, bare CRs and LFs in every place, obs-folds and spaces before colons,
 * both must serve exactly the same heads; the front end relies on llhttp refusing a bare CR or LF.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isSimpleFieldList, isSimpleRequestLine } from './front-end.ts';
import { NODE_HTTP_COMMON } from './node-http-common.ts';

const MAX_HEADER_SIZE = 16 * 1024;

/** The oracle: the checks over the head's text (without its CRLF CRLF) the front end made before llhttp read it. */
function servedByText(text: string): boolean {
  return (
    /^(?:GET|HEAD) [\x21-\x7e]+ HTTP\/1\.1(?:\r\n|$)/.test(text) &&
    /\r\nhost[ \t]*:/i.test(text) &&
    !/\r\n(?:content-length|transfer-encoding|upgrade|expect)[ \t]*:/i.test(text) &&
    !/\r(?!\n)|(?<!\r)\n/.test(text)
  );
}

interface Parsed {
  /** llhttp read the whole head without an error, not an upgrade. */
  complete: boolean;
  fields: string[];
}

/** llhttp configured as the front end (and node:http) configure it, reading `head` (CRLF CRLF included). */
function parse(head: string): Parsed {
  const binding = NODE_HTTP_COMMON!;
  const Parser = binding.HTTPParser;
  const parser = new Parser();
  parser.initialize(Parser.REQUEST, {}, MAX_HEADER_SIZE, Parser.kLenientNone);
  let fields: string[] = [];
  let done = false;
  let upgraded = false;
  parser[Parser.kOnHeaders] = (headers: string[]): void => {
    fields.push(...headers);
  };
  parser[Parser.kOnHeadersComplete] = (_major: number, _minor: number, headers: string[] | undefined, ...rest: unknown[]): number => {
    if (headers !== undefined) fields = [...fields, ...headers];
    upgraded = rest[4] === true;
    done = true;
    return 0;
  };
  parser[Parser.kOnBody] = (): void => {};
  parser[Parser.kOnMessageComplete] = (): void => {};
  const bytes = Buffer.from(head, 'latin1');
  const result = parser.execute(bytes);
  return { complete: done && !upgraded && result === bytes.length, fields };
}

/** What the front end decides now for the head `text` (its CRLF CRLF after it). */
function servedByParse(text: string): boolean {
  if (!isSimpleRequestLine(text)) return false;
  const parsed = parse(`${text}\r\n\r\n`);
  return parsed.complete && isSimpleFieldList(parsed.fields);
}

/** The oracle as the front end used it: the text checks, then llhttp's reading. */
function servedBefore(text: string): boolean {
  return servedByText(text) && parse(`${text}\r\n\r\n`).complete;
}

/** Mostly the well-formed choice, sometimes one of the hostile ones: both sides of the decision are reached. */
function mostly<T>(usual: T, ...others: T[]): fc.Arbitrary<T> {
  return fc.oneof(
    { arbitrary: fc.constant(usual), weight: 6 * others.length },
    { arbitrary: fc.constantFrom(...others), weight: others.length },
  );
}

const BREAK = mostly('\r\n', '\n', '\r', '\r\r\n', '\n\r', '\r\n ', '\r\n\t');
const METHOD = mostly('GET', 'HEAD', 'POST', 'get', 'GET\r', 'GE\nT');
const TARGET = mostly('/a?b=1', '/', '/a\rb', '/a\nb', '/caf\xe9', '*', 'http://x/y', '/a b');
const VERSION = mostly('HTTP/1.1', 'HTTP/1.0', 'HTTP/1.1\r', 'HTTP/1.1\n', 'HTTP/2.0');
const NAME = mostly(
  'Accept',
  'Host',
  'host',
  'HOST',
  'Host ',
  ' Host',
  'Ho\rst',
  'Content-Length',
  'content-length',
  'Content-Length ',
  'Transfer-Encoding',
  'transfer-encoding\t',
  'Upgrade',
  'UPGRADE',
  'Expect',
  'Connection',
  'X\nHost',
  'Bad(Name)',
  'Content-Lengths',
  'Hosts',
  'Expects',
);
const COLON = mostly(': ', ':', ' :', ':\t');
const VALUE = mostly(
  'a',
  'shop.example',
  '0',
  '5',
  'chunked',
  'websocket',
  'upgrade',
  'close',
  '100-continue',
  'a\rb',
  'a\nb',
  'a\r',
  '\n',
  ' x ',
  'a\x01b',
  '',
);
const FIELD = fc.tuple(BREAK, NAME, COLON, VALUE).map(([lineBreak, name, colon, value]) => `${lineBreak}${name}${colon}${value}`);
/** A Host field, well-formed most of the time. */
const HOST = fc.tuple(BREAK, mostly('Host', 'host', 'Host ', 'Ho\rst'), COLON, mostly('shop.example', 'a\rb', 'a\nb', ''));

const HEAD = fc
  .tuple(METHOD, TARGET, VERSION, fc.array(FIELD, { maxLength: 5 }), fc.option(HOST, { freq: 5 }), fc.nat())
  .map(([method, target, version, fields, host, at]) => {
    // A copy: fast-check hands the same generated array to every shrinking step.
    const lines = [...fields];
    if (host !== null) lines.splice(at % (lines.length + 1), 0, host.join(''));
    const text = `${method} ${target} ${version}${lines.join('')}`;
    // The front end reads a head up to the first CRLF CRLF: what is before it.
    return text.slice(0, `${text}\r\n\r\n`.indexOf('\r\n\r\n'));
  });

describe('which heads the handle front end serves', () => {
  it('reads the fields llhttp parsed', () => {
    assert.equal(isSimpleFieldList(['Host', 'a']), true);
    assert.equal(isSimpleFieldList(['host', 'a', 'Accept', '*/*']), true);
    assert.equal(isSimpleFieldList([]), false);
    assert.equal(isSimpleFieldList(['Accept', '*/*']), false);
    assert.equal(isSimpleFieldList(['Host', 'a', 'Content-Length', '0']), false);
    assert.equal(isSimpleFieldList(['Host', 'a', 'TRANSFER-ENCODING', 'chunked']), false);
    assert.equal(isSimpleFieldList(['Host', 'a', 'upgrade', 'websocket']), false);
    assert.equal(isSimpleFieldList(['Expect', '100-continue', 'Host', 'a']), false);
    assert.equal(isSimpleRequestLine('GET /x HTTP/1.1\r\nHost: a'), true);
    assert.equal(isSimpleRequestLine('HEAD /x HTTP/1.1'), true);
    assert.equal(isSimpleRequestLine('GET /x HTTP/1.0\r\nHost: a'), false);
    assert.equal(isSimpleRequestLine('POST /x HTTP/1.1\r\nHost: a'), false);
    assert.equal(isSimpleRequestLine('GET /caf\xe9 HTTP/1.1\r\nHost: a'), false);
    assert.equal(isSimpleRequestLine('GET /x HTTP/1.1\nHost: a'), false);
  });

  it('serves the same heads as the checks over the text did, and none with a bare CR or LF', () => {
    let served = 0;
    let refused = 0;
    fc.assert(
      fc.property(HEAD, (text) => {
        const now = servedByParse(text);
        assert.equal(now, servedBefore(text), JSON.stringify(text));
        if (now) {
          assert.doesNotMatch(text, /\r(?!\n)|(?<!\r)\n/);
          served++;
        } else refused++;
      }),
      { numRuns: 20_000 },
    );
    // The generator reaches both sides, or the comparison says nothing.
    assert.ok(served > 500 && refused > 500, `served ${served}, refused ${refused}`);
  });

  it('leaves every bare CR or LF in a head that is otherwise served to node:http', () => {
    const base = 'GET /a HTTP/1.1\r\nHost: shop.example\r\nAccept: */*\r\nX-Long: abcdef';
    for (let at = 0; at <= base.length; at++) {
      for (const bare of ['\r', '\n']) {
        const text = base.slice(0, at) + bare + base.slice(at);
        if (/\r(?!\n)|(?<!\r)\n/.test(text)) assert.equal(servedByParse(text), false, JSON.stringify(text));
      }
    }
  });
});
