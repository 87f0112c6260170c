/**
 * Request bodies that are legal and under every size limit but slow for the WAF to inspect (the
 * inspection-isolation tests and bench/hostile's "expensive bodies"). Each carries ATTACK_MARK, so
 * an origin can count those that reached it.
 */

/** In what the origin receives: a body of the attack. */
export const ATTACK_MARK = 'xq7attack';
/** What the WAF inspects of a body by default (ModSecurity's SecRequestBodyNoFilesLimit). */
const BODY_LIMIT = 131072;

export interface ExpensiveBody {
  readonly shape: string;
  readonly contentType: string;
  readonly body: Buffer;
}

/** What a multipart/form-data upload may be by default (TPS_WAF_MULTIPART_BODY_LIMIT). */
const MULTIPART_LIMIT = 1024 * 1024;
/** Text that the CRS's transformations and SQL/XSS rules all have work with, in every byte. */
const DENSE = "a'b(c)<d select ";

/**
 * Request bodies that are legal and under every size limit, but slow to inspect: each costs the
 * CRS from hundreds of milliseconds to seconds of one WAF thread (on a shared 2-core machine,
 * warm: the multipart parts 0.6-1.9 s, the long value and the deep JSON 4.5-6 s), past the
 * 250 ms inspection budget. (Many urlencoded parameters are not among them: 20,000 of them cost
 * about 100 ms once the engine is warm.)
 */
export function expensiveBodies(): ExpensiveBody[] {
  const boundary = 'b0undaryXq7';
  let multipart = `--${boundary}\r\nContent-Disposition: form-data; name="mark"\r\n\r\n${ATTACK_MARK}\r\n`;
  for (let i = 0; multipart.length < MULTIPART_LIMIT - 50_000; i++)
    multipart += `--${boundary}\r\nContent-Disposition: form-data; name="f${i}"\r\n\r\n${"a'b(c)<d".repeat(8)}\r\n`;
  multipart += `--${boundary}--\r\n`;
  const longValue = DENSE.repeat(Math.floor((BODY_LIMIT - 1024) / DENSE.length));
  let deep: unknown = { mark: ATTACK_MARK, q: longValue.slice(0, BODY_LIMIT - 4096) };
  for (let depth = 0; depth < 200; depth++) deep = { a: deep };
  return [
    {
      shape: 'many parameters (multipart parts)',
      contentType: `multipart/form-data; boundary=${boundary}`,
      body: Buffer.from(multipart, 'latin1'),
    },
    {
      shape: 'a long value with much to transform',
      contentType: 'application/x-www-form-urlencoded',
      body: Buffer.from(`mark=${ATTACK_MARK}&q=${longValue}`, 'latin1'),
    },
    { shape: 'deep JSON', contentType: 'application/json', body: Buffer.from(JSON.stringify(deep), 'latin1') },
  ];
}
