/**
 * FrontResponse against Node's ServerResponse: the same calls (writeHead, write, end) on each, for
 * GET and HEAD requests that keep the connection or ask to close it, must put the same bytes on
 * the wire (the Date value aside). Node's side runs on a real server and socket; the front end's
 * side writes into a connection that keeps the bytes.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { FrontResponse, type ResponseConnection } from './front-response.ts';

type Script = (res: {
  writeHead(status: number, headers: string[]): unknown;
  write(chunk: Uint8Array): unknown;
  end(data?: string): unknown;
}) => void;

const SCRIPTS: Record<string, Script> = {
  'a body by end, no length': (res) => {
    res.writeHead(200, ['content-type', 'text/plain']);
    res.end('hello');
  },
  'a length given': (res) => {
    res.writeHead(200, ['Content-Length', '5']);
    res.end('hello');
  },
  '204': (res) => {
    res.writeHead(204, []);
    res.end();
  },
  '304 with an ETag': (res) => {
    res.writeHead(304, ['ETag', '"x"']);
    res.end();
  },
  'writes, then end': (res) => {
    res.writeHead(200, ['a', '1']);
    res.write(Buffer.from('ab'));
    res.write(Buffer.from('cd'));
    res.end();
  },
  'Connection: close given': (res) => {
    res.writeHead(200, ['connection', 'close']);
    res.end('x');
  },
  'chunked given': (res) => {
    res.writeHead(200, ['Transfer-Encoding', 'chunked']);
    res.write(Buffer.from('ab'));
    res.end('c');
  },
  'a Date given': (res) => {
    res.writeHead(404, ['Date', 'Mon, 01 Jan 2024 00:00:00 GMT']);
    res.end('nf');
  },
  'a status without a reason': (res) => {
    res.writeHead(599, []);
    res.end('');
  },
  'a write without a head': (res) => {
    res.write(Buffer.from('x'));
    res.end();
  },
  'duplicate headers, obs-text in a value': (res) => {
    res.writeHead(200, ['Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'X-Latin', 'caf\xe9']);
    res.end('ok');
  },
};

/** The bytes of one response a connection receives, from a connection that keeps them. */
function frontBytes(script: Script, method: string, keepAlive: boolean): string {
  const chunks: Buffer[] = [];
  const connection: ResponseConnection = {
    keepAlive,
    keepAliveSeconds: 5,
    gone: false,
    write: (bytes) => {
      chunks.push(Buffer.from(bytes));
      return true;
    },
    finished: () => {},
    destroy: () => {},
  };
  script(new FrontResponse(connection, method));
  return Buffer.concat(chunks).toString('latin1');
}

const withoutDate = (text: string): string => text.replace(/^(date: ).*$/gim, '$1<date>');

describe('FrontResponse writes what ServerResponse writes', () => {
  let server: http.Server;
  let port: number;
  let next: Script = () => {};

  before(async () => {
    server = http.createServer((_req, res) => next(res as unknown as Parameters<Script>[0]));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as net.AddressInfo).port;
  });

  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** One request on a fresh connection; the response's bytes once the server closes it (asked to) or the first response is whole. */
  function nodeBytes(script: Script, method: string, keepAlive: boolean): Promise<string> {
    next = script;
    return new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        // A keep-alive request is followed by a second one that asks to close: the first response ends where the second begins.
        const first = `${method} / HTTP/1.1\r\nHost: x\r\n${keepAlive ? '' : 'Connection: close\r\n'}\r\n`;
        socket.write(keepAlive ? `${first}GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n` : first);
      });
      const chunks: Buffer[] = [];
      let served = 0;
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('close', () => {
        const text = Buffer.concat(chunks).toString('latin1');
        const second = keepAlive ? text.indexOf('HTTP/1.1 ', 1) : -1;
        resolve(second === -1 ? text : text.slice(0, second));
      });
      // The second request's answer: a fixed one, whatever the script.
      const script2 = next;
      next = (res) => {
        served++;
        if (served === 1) script2(res);
        else {
          res.writeHead(200, ['content-length', '0']);
          res.end();
        }
      };
    });
  }

  for (const [name, script] of Object.entries(SCRIPTS)) {
    for (const method of ['GET', 'HEAD']) {
      for (const keepAlive of [true, false]) {
        it(`${name}: ${method}, ${keepAlive ? 'keep-alive' : 'close'}`, async () => {
          const byNode = await nodeBytes(script, method, keepAlive);
          assert.equal(withoutDate(frontBytes(script, method, keepAlive)), withoutDate(byNode));
        });
      }
    }
  }
});

describe('FrontResponse.writeHeadOfTokens', () => {
  /** The bytes `writeHead` and `writeHeadOfTokens` write for the same head (both, or the error both throw). */
  function both(headers: string[]): [string, string] {
    const of = (tokens: boolean): string => {
      const script: Script = (res) => {
        const front = res as unknown as FrontResponse;
        if (tokens) front.writeHeadOfTokens(200, headers);
        else front.writeHead(200, headers);
        res.end('x');
      };
      try {
        return withoutDate(frontBytes(script, 'GET', true));
      } catch (err) {
        return `threw ${(err as { code?: string }).code}`;
      }
    };
    return [of(false), of(true)];
  }

  it('writes what writeHead writes for names that are tokens', () => {
    const [checked, unchecked] = both(['Content-Type', 'text/plain', 'X-A', 'b', 'Set-Cookie', 'c=1']);
    assert.equal(unchecked, checked);
  });

  it('still refuses a value node:http refuses', () => {
    for (const value of ['a\nb', 'a\rb', 'a\x00b', 'a\x7fb']) {
      const [checked, unchecked] = both(['X-A', value]);
      assert.equal(checked, 'threw ERR_INVALID_CHAR');
      assert.equal(unchecked, checked);
    }
  });
});
