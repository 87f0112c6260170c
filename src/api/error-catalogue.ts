/**
 * Every error code the API answers, with its HTTP status and what it means: the routes build their
 * errors from it (`errorObject`, `ApiError` take a code of this list and its status), the OpenAPI
 * document lists it (`ApiErrorCode` schema) and docs/decisions.md explains it.
 *
 * `title` names the problem in a few words for the documentation; the error objects' own `title`
 * is the HTTP status's reason phrase ("Conflict"), the same for every code of a status.
 *
 * The codes come from ../shared/spec/traffic-protection-api.md and ../shared/DESIGN.md where they
 * name one (a contract: keep them exact).
 */
export interface ApiErrorKind {
  /** The status the code is answered with. */
  status: number;
  /** Another status the same code has in another place (`description` says where). */
  alsoStatus?: number;
  title: string;
  description: string;
}

export const API_ERRORS = {
  // --- the request itself -----------------------------------------------------------------------
  BAD_URL: {
    status: 400,
    title: 'Bad URL',
    description: 'The path is not a valid URL path, or a segment is longer than any id of this API.',
  },
  MALFORMED_BODY: { status: 400, title: 'Malformed body', description: 'The body is empty or not valid JSON.' },
  BODY_TOO_LARGE: {
    status: 413,
    title: 'Body too large',
    description: "The body is larger than the API's limit (TPS_API_BODY_LIMIT, 1 MiB by default).",
  },
  UNSUPPORTED_MEDIA_TYPE: {
    status: 415,
    title: 'Unsupported media type',
    description: 'The Content-Type is not the one of this route: application/vnd.api+json for JSON:API writes (source.header).',
  },
  INVALID_VALUE: {
    status: 422,
    alsoStatus: 400,
    title: 'Invalid value',
    description:
      'A value breaks the schema: 422 for the body (source.pointer names the field), 400 for a query or path parameter ' +
      '(source.parameter). The detail says which rule.',
  },
  BAD_REQUEST: {
    status: 400,
    title: 'Bad request',
    description: 'Another request the HTTP layer refuses before any route reads it, with the 4xx status it gives.',
  },
  NOT_FOUND: {
    status: 404,
    title: 'Not found',
    description: "No such route, or no such resource of the caller's tenant: another tenant's id is answered the same way.",
  },
  TOO_MANY_REQUESTS: {
    status: 429,
    title: 'Too many requests',
    description:
      'Past the API calls per minute of the service account, signed-in portal user or (without either) client address; ' +
      'Retry-After says when to try again.',
  },
  STARTING: { status: 503, title: 'Starting', description: 'The service is binding its listeners; try again in a moment.' },
  INTERNAL_ERROR: {
    status: 500,
    title: 'Internal error',
    description: "The service failed to handle the request; the operator's log has why.",
  },

  // --- who calls --------------------------------------------------------------------------------
  UNAUTHORIZED: {
    status: 401,
    title: 'Unauthorized',
    description: 'No access token, or one that is invalid, expired or of a revoked service account (WWW-Authenticate says which).',
  },
  INSUFFICIENT_SCOPE: {
    status: 403,
    title: 'Insufficient scope',
    description: 'The access token lacks the scope this call needs (read, write, insight).',
  },
  FOREIGN_ACCOUNT: {
    status: 403,
    title: 'Foreign account',
    description: "relationships.belongsTo names an account other than the access token's.",
  },
  FOREIGN_TENANT: { status: 403, title: 'Foreign tenant', description: "filter[tenantId] names a tenant other than the access token's." },

  // --- traffic configurations ---------------------------------------------------------------
  FRONTEND_IP_REQUIRED: { status: 422, title: 'Front-end IP required', description: 'frontend has neither ipv4 nor ipv6.' },
  UNKNOWN_FRONTEND_IP: {
    status: 422,
    title: 'Unknown front-end IP',
    description: "The address is not one of the account's available front-end IPs.",
  },
  ORIGIN_NOT_ALLOWED: {
    status: 422,
    title: 'Origin not allowed',
    description:
      "An origin address or a crlUrl host is a literal address the origin policy refuses (loopback, private, link-local, the service's own " +
      'listeners, ...) unless the operator allows its network.',
  },
  UNKNOWN_CERTIFICATE: { status: 422, title: 'Unknown certificate', description: 'A certificateId names no certificate of the account.' },
  CUSTOMER_CERTIFICATE_REQUIRED: {
    status: 422,
    title: 'Customer certificate required',
    description: 'The certificate presented to the origin (mutual TLS) must be one the customer uploaded.',
  },
  TLS_REQUIRED: { status: 422, title: 'TLS required', description: 'Client certificate verification needs HTTPS: frontend.certificateId.' },
  UNKNOWN_CA_CERTIFICATE: {
    status: 422,
    title: 'Unknown CA certificate',
    description: 'A caCertificateIds entry names no CA certificate of the account.',
  },
  CA_CERTIFICATES_REQUIRED: {
    status: 422,
    title: 'CA certificates required',
    description: 'CUSTOM_TRUSTSTORE needs at least one CA certificate id.',
  },
  UNEXPECTED_CA_CERTIFICATES: {
    status: 422,
    title: 'Unexpected CA certificates',
    description: 'caCertificateIds go with CUSTOM_TRUSTSTORE only.',
  },
  ID_MISMATCH: { status: 409, title: 'Id mismatch', description: 'data.id is not the id in the path.' },
  TYPE_MISMATCH: { status: 409, title: 'Type mismatch', description: 'A traffic configuration keeps its type (httpProxy, l4Proxy).' },
  PORT_IN_USE: { status: 409, title: 'Port in use', description: 'Another proxy holds the front-end IP, port and protocol.' },
  CONCURRENT_DELETE: {
    status: 409,
    title: 'Deleted meanwhile',
    description: 'The traffic configuration was deleted while this change was made.',
  },
  QUOTA_EXCEEDED: {
    status: 409,
    title: 'Quota exceeded',
    description:
      'The account holds as many proxies, certificates or CA certificates as its quota allows, or has as many service-issued ' +
      'certificate orders pending (pointer /data).',
  },

  // --- certificates and CA certificates -------------------------------------------------------
  INVALID_CERTIFICATE: {
    status: 422,
    title: 'Invalid certificate',
    description: 'A PEM certificate is missing, cannot be parsed, or a CA entry holds more than one.',
  },
  INVALID_PRIVATE_KEY: {
    status: 422,
    title: 'Invalid private key',
    description: 'privateKey is not a PEM private key, or it is encrypted.',
  },
  KEY_MISMATCH: { status: 422, title: 'Key mismatch', description: 'The private key does not belong to the certificate.' },
  WEAK_KEY: { status: 422, title: 'Weak key', description: 'An RSA key under 2048 bits or an EC curve weaker than P-256.' },
  UNSUPPORTED_KEY: { status: 422, title: 'Unsupported key', description: 'A key that is neither RSA nor EC.' },
  CERTIFICATE_NOT_YET_VALID: {
    status: 422,
    title: 'Certificate not yet valid',
    description: 'A certificate whose notBefore is still to come.',
  },
  CERTIFICATE_EXPIRED: { status: 422, title: 'Certificate expired', description: 'A certificate past its notAfter.' },
  CHAIN_BROKEN: {
    status: 422,
    title: 'Chain broken',
    description: 'The intermediate certificates do not link the certificate to its issuer, each used once.',
  },
  NOT_A_CA_CERTIFICATE: {
    status: 422,
    title: 'Not a CA certificate',
    description: 'An uploaded CA certificate lacks basicConstraints CA:TRUE.',
  },
  DUPLICATE_DOMAIN: {
    status: 422,
    title: 'Duplicate domain',
    description: 'An order names a domain twice (compared without case and trailing dot).',
  },
  DOMAIN_CLAIMED: {
    status: 409,
    title: 'Domain claimed',
    description:
      'Another account holds a PENDING or unexpired ISSUED service-issued certificate for the domain (pointer /data/attributes/domains/N).',
  },
  ACME_DISABLED: {
    status: 409,
    title: 'ACME disabled',
    description:
      'The operator runs no ACME service (TPS_ACME_DIRECTORY_URL=off): service-issued certificates are neither ordered nor renewed ' +
      '(pointer /data); uploaded certificates work as ever.',
  },
  NOT_SERVICE_ISSUED: {
    status: 409,
    title: 'Not service-issued',
    description: 'Only service-issued certificates are renewed by the service.',
  },
  IN_USE: {
    status: 409,
    title: 'In use',
    description: "A traffic configuration refers to the certificate or CA certificate; the detail names the account's own.",
  },

  // --- insight ------------------------------------------------------------------------------
  UNKNOWN_CURSOR: {
    status: 400,
    title: 'Unknown cursor',
    description: "page[after] (or the portal's cursor) names no event of the tenant.",
  },
  INVALID_RANGE: { status: 400, title: 'Invalid range', description: 'A portal dashboard range whose from is not before its to.' },
  RANGE_TOO_LONG: { status: 400, title: 'Range too long', description: 'A portal dashboard range longer than 92 days.' },

  // --- portal sessions ----------------------------------------------------------------------
  NOT_SIGNED_IN: { status: 401, title: 'Not signed in', description: 'A portal endpoint called without a live session.' },
  INVALID_CREDENTIALS: { status: 401, title: 'Invalid credentials', description: 'Wrong email or password at portal sign-in.' },
  CSRF_TOKEN_INVALID: { status: 403, title: 'CSRF token invalid', description: 'A write with the portal session lacks its X-CSRF-Token.' },
  TOO_MANY_SIGN_IN_ATTEMPTS: {
    status: 429,
    title: 'Too many sign-in attempts',
    description: 'Failed portal sign-ins throttled per email and client address, and per client address; Retry-After says when.',
  },
  SIGN_IN_BUSY: {
    status: 503,
    title: 'Sign-in busy',
    description: 'Too many portal sign-ins wait for a password hash; Retry-After says when.',
  },
} as const satisfies Record<string, ApiErrorKind>;

export type ApiErrorCode = keyof typeof API_ERRORS;

export function isApiErrorCode(code: string): code is ApiErrorCode {
  return Object.hasOwn(API_ERRORS, code);
}

/** The catalogue as an OpenAPI schema: one `const` per code, its status in `x-status`. */
export function apiErrorCodeSchema(): Record<string, unknown> {
  return {
    type: 'string',
    description: 'The `code` of a JSON:API error object: every code the API answers, with its HTTP status.',
    oneOf: Object.entries(API_ERRORS).map(([code, kind]: [string, ApiErrorKind]) => ({
      const: code,
      title: kind.title,
      description: `${kind.alsoStatus === undefined ? kind.status : `${kind.status} or ${kind.alsoStatus}`}: ${kind.description}`,
      'x-status': kind.alsoStatus === undefined ? [kind.status] : [kind.status, kind.alsoStatus],
    })),
  };
}
