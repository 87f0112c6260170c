/**
 * The pages the proxy answers with itself: malformed or ambiguous (400), blocked (403 geo fence, WAF, client certificate),
 * rate-limited (429), too large (413), not inspected in time (503, WAF failMode CLOSED), request limits not checked (503) and origin
 * failures (502, 504). Small, plain HTML with no
 * external asset, so they render anywhere and cost nothing to serve under attack. Each shows the
 * support id: the same 32-hex id as the insight event (or access-log line) of that request, so a
 * visitor can quote it and the customer can find the event.
 */

export type PageKind =
  | 'bad-request'
  | 'geo-fence'
  | 'waf'
  | 'client-certificate'
  | 'rate-limit'
  | 'body-too-large'
  | 'waf-unavailable'
  | 'rate-limit-unavailable'
  | 'bad-gateway'
  | 'gateway-timeout'
  | 'origin-busy';

interface PageText {
  status: number;
  title: string;
  message: string;
}

const PAGES: Record<PageKind, PageText> = {
  'bad-request': {
    status: 400,
    title: 'Bad request',
    message: 'This request is malformed or ambiguous (its address or headers can be read in more than one way) and was refused.',
  },
  'geo-fence': {
    status: 403,
    title: 'Access denied',
    message: 'This site is not available from your location.',
  },
  waf: {
    status: 403,
    title: 'Request blocked',
    message: 'This request was blocked by the security rules of this site.',
  },
  'client-certificate': {
    status: 403,
    title: 'Client certificate required',
    message: 'This site requires a valid client certificate.',
  },
  'rate-limit': {
    status: 429,
    title: 'Too many requests',
    message: 'You have sent too many requests in a short time. Please wait and try again.',
  },
  'body-too-large': {
    status: 413,
    title: 'Request too large',
    message: 'The request body is larger than this site accepts.',
  },
  'waf-unavailable': {
    status: 503,
    title: 'Service unavailable',
    message: 'The security rules of this site could not check this request in time. Please try again in a moment.',
  },
  'rate-limit-unavailable': {
    status: 503,
    title: 'Service unavailable',
    message: 'The request limits of this site could not be checked for this request. Please try again in a moment.',
  },
  'bad-gateway': {
    status: 502,
    title: 'Bad gateway',
    message: 'The origin server of this site could not be reached.',
  },
  'gateway-timeout': {
    status: 504,
    title: 'Gateway timeout',
    message: 'The origin server of this site did not answer in time.',
  },
  'origin-busy': {
    status: 503,
    title: 'Service busy',
    message: 'This site is receiving more requests than it can serve right now. Please try again in a moment.',
  },
};

export function pageStatus(kind: PageKind): number {
  return PAGES[kind].status;
}

/**
 * The HTML of one page. `supportId` and `location` come from our own code (hex and three letters),
 * but are escaped anyway so that a future caller cannot turn the page into an injection point.
 */
export function renderPage(kind: PageKind, supportId: string, location: string, status = PAGES[kind].status): string {
  const page = PAGES[kind];
  return (
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">' +
    '<meta name="viewport" content="width=device-width,initial-scale=1">' +
    `<title>${status} ${page.title}</title>` +
    '<style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}' +
    'h1{font-size:1.5rem}code{background:#f3f3f3;padding:.1rem .3rem}small{color:#666}</style></head>' +
    `<body><h1>${status} ${page.title}</h1><p>${page.message}</p>` +
    `<p>Support ID: <code>${escapeHtml(supportId)}</code></p>` +
    `<p><small>Location ${escapeHtml(location)}</small></p></body></html>\n`
  );
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
