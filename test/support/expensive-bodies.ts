/**
 * Request bodies that are legal and under every size limit but slow for the WAF to inspect (the
 * inspection-isolation tests and bench/hostile's "expensive bodies"). Each carries ATTACK_MARK, so
 * an origin can count those that reached it.
 */

/** In what the origin receives: a body of the attack. */
export const ATTACK_MARK = 'xq7attack';

export interface ExpensiveBody {
  readonly shape: string;
  readonly contentType: string;
  readonly body: Buffer;
}

/** The body a proxy must let the WAF inspect for these (its `waf.requestBodyLimit`: the most it may ask). */
export const EXPENSIVE_BODY_LIMIT = 1024 * 1024;

/** Markup and SQL words: every transformation chain and most CRS operators have work with them. */
const CHUNK = 'a<x y="1"> select from -- ';

/**
 * Request bodies that are legal and under every limit of a proxy whose `waf.requestBodyLimit` is
 * EXPENSIVE_BODY_LIMIT (ModSecurity's argument, part and depth limits included), but slow to
 * inspect: many small steps each, about 0.09 to 0.9 s of one WAF thread at paranoia 1 (the compiled
 * engine, measured alone, in process, warm), each several times the budget the inspection-isolation
 * tests set (30 ms); a faster engine lowers these figures, and then that budget must follow.
 */
export function expensiveBodies(): ExpensiveBody[] {
  const value = encodeURIComponent(CHUNK.repeat(20));
  const parameters = `mark=${ATTACK_MARK}&${Array.from({ length: 998 }, (_, i) => `field${i}=${value}`).join('&')}`;
  let parts = `--b0undary\r\nContent-Disposition: form-data; name="mark"\r\n\r\n${ATTACK_MARK}\r\n`;
  for (let i = 0; i < 989; i++) parts += `--b0undary\r\nContent-Disposition: form-data; name="part${i}"\r\n\r\n${CHUNK.repeat(30)}\r\n`;
  const leaves = Array.from({ length: 989 }, (_, i) => `"v${i} ${'select <b> '.repeat(80)}"`).join(',');
  const long = encodeURIComponent('%2541<sc ript>&#x41;/**/ union '.repeat(3300).slice(0, 100_000));
  return [
    { shape: 'many parameters', contentType: 'application/x-www-form-urlencoded', body: Buffer.from(parameters) },
    {
      shape: 'many multipart parts',
      contentType: 'multipart/form-data; boundary=b0undary',
      body: Buffer.from(`${parts}--b0undary--\r\n`),
    },
    {
      shape: 'deep JSON',
      contentType: 'application/json',
      body: Buffer.from(`${'{"a":'.repeat(500)}["${ATTACK_MARK}",${leaves}]${'}'.repeat(500)}`),
    },
    {
      shape: 'long values',
      contentType: 'application/x-www-form-urlencoded',
      body: Buffer.from(`mark=${ATTACK_MARK}&${Array.from({ length: 4 }, (_, i) => `long${i}=${long}`).join('&')}`),
    },
  ];
}

/**
 * One value of 127 KB (under the default body limit and the per-value limit) of dense markup and
 * SQL words: a single operator step on it takes about 0.4 s warm and over 1 s cold, longer than
 * the cooperative budget can interrupt, so the watchdog replaces the thread (and every request
 * the thread held fails with it).
 */
export function denseValueBody(): ExpensiveBody {
  const dense = "a'b(c)<d select ";
  const value = dense.repeat(Math.floor((128 * 1024 - 1024) / dense.length));
  return {
    shape: 'one dense 127 KB value',
    contentType: 'application/x-www-form-urlencoded',
    body: Buffer.from(`mark=${ATTACK_MARK}&q=${value}`, 'latin1'),
  };
}
