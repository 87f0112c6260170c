/** The requests both WAF engine benches send (run.ts, ab.ts). */
import type { WafEngineSettings, WafRequest, WafResponse } from '@tps/waf';

const BROWSER_HEADERS: [string, string][] = [
  ['Host', 'shop.example.com'],
  ['User-Agent', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36'],
  ['Accept', 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8'],
  ['Accept-Language', 'en-US,en;q=0.9,de;q=0.8'],
  ['Accept-Encoding', 'gzip, deflate, br'],
  ['Referer', 'https://shop.example.com/products?category=shoes'],
  ['Cookie', 'session=8f14e45fceea167a5a36dedd4bea2543; theme=dark; _ga=GA1.2.1234567890.1700000000'],
  ['Connection', 'keep-alive'],
];

function request(method: string, uri: string, extra: [string, string][] = [], body?: string): WafRequest {
  const bytes = body === undefined ? undefined : Buffer.from(body, 'utf8');
  const headers = [...BROWSER_HEADERS, ...extra];
  if (bytes) headers.push(['Content-Length', String(bytes.length)]);
  return {
    clientIp: '192.0.2.10',
    clientPort: 51234,
    serverIp: '198.51.100.1',
    serverPort: 80,
    method,
    uri,
    httpVersion: '1.1',
    headers,
    ...(bytes ? { body: bytes } : {}),
  };
}

function formBody(): string {
  // a profile form: realistic names and values, about 1 KB urlencoded
  const fields: [string, string][] = [
    ['first_name', 'Jane'],
    ['last_name', 'Doe'],
    ['email', 'jane.doe@example.com'],
    ['phone', '+1 555 0100 123'],
    ['company', 'Example Corporation Ltd'],
    ['street', '1200 Market Street, Suite 400'],
    ['city', 'San Francisco'],
    ['zip', '94102'],
    ['country', 'US'],
    ['newsletter', 'on'],
    ['language', 'en-US'],
    ['timezone', 'America/Los_Angeles'],
  ];
  let body = fields.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');
  const about =
    'I manage the online shop of our family business. We sell handmade furniture and garden tools, ship across the country and love good customer service. Please contact me by mail rather than by phone during business hours. Thank you for the great product and the quick support last month';
  body += `&about=${encodeURIComponent(about)}`;
  while (body.length < 1000) body += `&note${body.length}=${encodeURIComponent('thank you')}`;
  return body;
}

function jsonBody(): string {
  const items = [];
  for (let i = 0; JSON.stringify(items).length < 10_000; i++) {
    items.push({
      id: i,
      sku: `SKU-${1000 + i}`,
      name: `Product ${i} deluxe edition`,
      price: 19.99 + i,
      tags: ['new', 'sale', `group${i % 7}`],
      stock: { warehouse: 'north', count: i * 3 },
    });
  }
  return JSON.stringify({ order: { customer: { name: 'Jane Doe', email: 'jane@example.com' }, items } });
}

export const SCENARIOS: { key: string; name: string; request: WafRequest }[] = [
  { key: 'get', name: 'benign GET', request: request('GET', '/products/shoes?color=red&size=42&sort=price_asc&page=2') },
  {
    key: 'post',
    name: '1 KB form POST',
    request: request('POST', '/account/profile', [['Content-Type', 'application/x-www-form-urlencoded']], formBody()),
  },
  { key: 'json', name: '10 KB JSON POST', request: request('POST', '/api/v1/orders', [['Content-Type', 'application/json']], jsonBody()) },
  {
    key: 'attack',
    name: 'blocked attack',
    request: request('GET', '/products?id=1%27%20UNION%20SELECT%20username,password%20FROM%20users--%20-'),
  },
];

/**
 * Requests the A/B and profile scripts take (SCENARIO=<key>) beside SCENARIOS, outside run.ts's
 * table: `minimal`, a GET of three short headers to `/`, is the engine's fixed cost per
 * transaction (the rule loop, the CRS setup, the collections), whatever the request holds.
 */
export const EXTRA_SCENARIOS: { key: string; name: string; request: WafRequest }[] = [
  {
    key: 'minimal',
    name: 'minimal GET',
    request: {
      clientIp: '192.0.2.10',
      clientPort: 51234,
      serverIp: '198.51.100.1',
      serverPort: 80,
      method: 'GET',
      uri: '/',
      httpVersion: '1.1',
      headers: [
        ['Host', 'example.com'],
        ['User-Agent', 'curl/8.5.0'],
        ['Accept', '*/*'],
      ],
    },
  },
];

/** The scenario of SCENARIOS or EXTRA_SCENARIOS with this key (the scripts' SCENARIO; default get). */
export function scenarioOf(key = 'get'): { key: string; name: string; request: WafRequest } {
  const all = [...SCENARIOS, ...EXTRA_SCENARIOS];
  const scenario = all.find((s) => s.key === key);
  if (!scenario) throw new Error(`SCENARIO: one of ${all.map((s) => s.key).join(', ')}`);
  return scenario;
}

/** The settings the paired and profiling benches run under: PARANOIA (1), BLOCKING. */
export function settingsFromEnv(): WafEngineSettings {
  return { paranoiaLevel: Number(process.env.PARANOIA ?? 1) as WafEngineSettings['paranoiaLevel'], mode: 'BLOCKING' };
}

/** The response RESPONSE=1 inspects: bench/waf's origin answer, 57 bytes of text/plain. */
export const BENCH_RESPONSE: WafResponse = {
  status: 200,
  httpVersion: '1.1',
  headers: [
    ['Content-Type', 'text/plain'],
    ['Content-Length', '57'],
  ],
  body: Buffer.alloc(57, 0x78),
};
