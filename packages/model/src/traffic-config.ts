/**
 * Traffic configurations (proxies): the one definition of their attributes. The API validates
 * request bodies with these schemas, the OpenAPI document is generated from them, and the edge
 * reads the stored attributes through the static types derived from them.
 *
 * Names follow ../shared/spec/traffic-protection-api.md and ../shared/DESIGN.md (a contract).
 */
import { Type, type Static } from '@sinclair/typebox';
import { ISO_COUNTRY_CODES } from './countries.ts';
import { AccountRelationship, Uuid, ReadOnlyTimestamps, DiscriminatedUnion, Enum, Nullable } from './schema-helpers.ts';

export const HTTP_PROXY = 'httpProxy';
export const L4_PROXY = 'l4Proxy';
export type ProxyType = typeof HTTP_PROXY | typeof L4_PROXY;

const Port = Type.Integer({ minimum: 1, maximum: 65535, description: 'TCP/UDP port, 1-65535.' });

const Frontend = {
  ipv4: Type.Optional(Type.String({ format: 'ipv4', description: "One of the tenant's available IPv4 front-end addresses." })),
  ipv6: Type.Optional(Type.String({ format: 'ipv6', description: "One of the tenant's available IPv6 front-end addresses." })),
  port: Port,
};

export const ClientCertificateVerification = Type.Object(
  {
    mode: Enum(['VERIFY_AND_REJECT', 'VERIFY_AND_FORWARD'] as const, {
      description:
        'VERIFY_AND_REJECT: no valid client certificate, no request. VERIFY_AND_FORWARD: the certificate is ' +
        'optional and the verification result is passed to the origin in X-Client-Cert-* headers.',
    }),
    caCertificateIds: Type.Array(Uuid, {
      minItems: 1,
      uniqueItems: true,
      description: 'IDs of uploaded CA certificates that validate client certificates.',
    }),
    verifyCrl: Type.Boolean({ default: false, description: "Refuse client certificates revoked by the CAs' CRLs." }),
  },
  { additionalProperties: false },
);

const DeliveryMethod = Enum(['LEAST_CONNECTIONS', 'ROUND_ROBIN', 'SOURCE_IP_HASH'] as const, {
  default: 'LEAST_CONNECTIONS',
  description: 'How the next host is chosen when several hosts exist.',
});

export const BackendHost = Type.Object(
  {
    address: Type.String({
      minLength: 1,
      maxLength: 253,
      // An IPv4 or IPv6 literal, or a DNS name (CNAME) of letters, digits, hyphens and dots.
      pattern:
        '^(?:[0-9A-Fa-f:.]+|(?=.{1,253}$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.?)$',
      description:
        'IP address or DNS name (CNAME) of the origin. Internal addresses (loopback, private, link-local, CGNAT, ' +
        "multicast, ...) and the service's own are refused (422 ORIGIN_NOT_ALLOWED) unless the operator allows " +
        'their network; a name is resolved and checked at every connection.',
    }),
    port: Port,
  },
  { additionalProperties: false },
);

const Hosts = Type.Array(BackendHost, { minItems: 1, maxItems: 64, description: 'The origins of the asset.' });

export const VerifyCertificate = Type.Object(
  {
    mode: Enum(['SYSTEM_TRUSTSTORE', 'CUSTOM_TRUSTSTORE'] as const),
    caCertificateIds: Type.Optional(
      Type.Array(Uuid, {
        uniqueItems: true,
        description: 'Required with CUSTOM_TRUSTSTORE: at least one uploaded CA certificate ID.',
      }),
    ),
  },
  { additionalProperties: false, description: 'Absent or null: the origin certificate is not validated.' },
);

export const TlsSettings = Type.Object(
  {
    clientCertificateId: Type.Optional(
      Nullable(
        Type.String({
          format: 'uuid',
          description: 'ID of the customer-uploaded certificate the proxy presents to the origin (mutual TLS).',
        }),
      ),
    ),
    verifyCertificate: Type.Optional(Nullable(VerifyCertificate)),
  },
  {
    additionalProperties: false,
    description: 'Present: the proxy speaks HTTPS to the origin. Absent: plain HTTP.',
  },
);

const HttpBackend = Type.Object(
  {
    hosts: Hosts,
    deliveryMethod: Type.Optional(DeliveryMethod),
    tlsSettings: Type.Optional(Nullable(TlsSettings)),
  },
  { additionalProperties: false },
);

const L4Backend = Type.Object({ hosts: Hosts, deliveryMethod: Type.Optional(DeliveryMethod) }, { additionalProperties: false });

export const RuleExclusion = Type.Object(
  {
    ruleIds: Type.Array(Type.Integer({ minimum: 1, maximum: 999999 }), { minItems: 1, uniqueItems: true }),
    pathPrefix: Type.Optional(
      Type.String({
        pattern: '^/',
        maxLength: 2048,
        description:
          'Only requests whose path is this path or lies under it, by whole segments: /api covers /api and /api/x, not /api-admin.',
      }),
    ),
    target: Type.Optional(
      Type.String({
        pattern: '^(ARGS|ARGS_GET|ARGS_POST|ARGS_NAMES|REQUEST_COOKIES|REQUEST_COOKIES_NAMES|REQUEST_HEADERS|XML|FILES)(:[^\\s]{1,256})?$',
        description: 'Only this request field, ModSecurity-style: for example ARGS:q, REQUEST_COOKIES:session.',
      }),
    ),
  },
  { additionalProperties: false },
);

/**
 * The largest `waf.requestBodyLimit` a proxy may ask for: the WAF's CPU per request grows with the
 * bytes it inspects, and its threads are shared by every proxy of the node.
 */
export const MAX_WAF_REQUEST_BODY_LIMIT = 1024 * 1024;

/**
 * `waf.inputLimits`: how much of one request the WAF parses and inspects (ModSecurity's
 * SecArgumentsLimit, SecRequestBodyJsonDepthLimit ...). Bounds as @tps/waf's INPUT_LIMIT_BOUNDS.
 */
export const WafInputLimits = Type.Object(
  {
    arguments: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000,
        description:
          "Arguments (query string and body together). Absent: the operator's default (TPS_WAF_ARGUMENTS_LIMIT, 1000: ModSecurity's SecArgumentsLimit).",
      }),
    ),
    multipartParts: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 100_000,
        description: "Parts of a multipart/form-data body. Absent: the operator's default (TPS_WAF_MULTIPART_PARTS_LIMIT, 1000).",
      }),
    ),
    jsonDepth: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000,
        description:
          "Nesting of a JSON body. Absent: the operator's default (TPS_WAF_JSON_DEPTH_LIMIT, 512: ModSecurity's SecRequestBodyJsonDepthLimit).",
      }),
    ),
    jsonElements: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1_000_000,
        description:
          "Values (scalars, objects, arrays) of a JSON body. Absent: the operator's default (TPS_WAF_JSON_ELEMENTS_LIMIT, 10000).",
      }),
    ),
    xmlDepth: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000,
        description: "Nesting of an XML body's elements. Absent: the operator's default (TPS_WAF_XML_DEPTH_LIMIT, 256: libxml2's).",
      }),
    ),
    valueLength: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 64 * 1024 * 1024,
        description: "Bytes of one argument's name or value. Absent: the operator's default (TPS_WAF_VALUE_LENGTH_LIMIT, 131072).",
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      'A request past one of these limits is not parsed further and is refused (BLOCKING: 403 with a WAF_EVENT naming the ' +
      "limit's rule, 200007 for arguments; LOGGING: passed and logged), never passed on uninspected.",
  },
);

export const Waf = Type.Object(
  {
    mode: Enum(['BLOCKING', 'LOGGING'] as const, { default: 'BLOCKING' }),
    paranoiaLevel: Type.Integer({ minimum: 1, maximum: 4, default: 1 }),
    anomalyThreshold: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10000,
        description: 'Inbound anomaly score at which a request is blocked (CRS default 5).',
      }),
    ),
    logMatchedData: Type.Boolean({
      default: false,
      description: 'Put the matched request data into insight events. Off: it may hold passwords or tokens.',
    }),
    ruleExclusions: Type.Array(RuleExclusion, { default: [], maxItems: 500 }),
    failMode: Enum(['CLOSED', 'OPEN'] as const, {
      default: 'CLOSED',
      description:
        'A request the WAF cannot inspect in time (its queue is full, its inspection ran past the budget, its engine failed). ' +
        'CLOSED: answered 503 with the block ' +
        'page and its support id. OPEN: passed to the origin uninspected (counted in tps_edge_waf_uninspected_total and logged).',
    }),
    requestBodyLimit: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_WAF_REQUEST_BODY_LIMIT,
        description:
          'Request body bytes the WAF inspects (ModSecurity SecRequestBodyNoFilesLimit). A multipart/form-data upload may be ' +
          "longer, up to the operator's multipart limit. Absent: the operator's default (TPS_WAF_REQUEST_BODY_LIMIT, 131072).",
      }),
    ),
    inputLimits: Type.Optional(WafInputLimits),
    bodyLimitAction: Type.Optional(
      Enum(['REJECT', 'PROCESS_PARTIAL'] as const, {
        description:
          'A request body longer than requestBodyLimit. REJECT: 413 and a WAF_EVENT, nothing reaches the origin. ' +
          'PROCESS_PARTIAL: the first requestBodyLimit bytes are inspected, the rest passes uninspected, and a WAF_EVENT ' +
          "says bodyTruncated. Absent: the operator's default (TPS_WAF_BODY_LIMIT_ACTION, REJECT).",
      }),
    ),
  },
  { additionalProperties: false, default: {}, description: 'The WAF is on for every HTTP proxy: BLOCKING at paranoia 1 unless set.' },
);

export const RequestTarget = Type.Object(
  {
    ambiguousPath: Enum(['REFUSE', 'NORMALIZE', 'KEEP'] as const, {
      default: 'REFUSE',
      description:
        'A request path that servers read in different ways: an encoded slash or backslash (%2F, %5C) or a raw backslash, a ' +
        'dot segment with path parameters (/..;/), a NUL byte or bytes that are not UTF-8 once decoded, a bad %-escape. ' +
        'REFUSE: 400. NORMALIZE: slashes become separators and /..;/ is /../ (NUL, bad UTF-8 and bad escapes are still ' +
        'refused). KEEP: they stay data, escaped. Whatever the choice, the origin is sent the path the proxy decided on.',
    }),
    mergeSlashes: Type.Boolean({
      default: true,
      description: 'Empty path segments are dropped (//a//b is /a/b), as nginx merge_slashes on.',
    }),
  },
  {
    additionalProperties: false,
    default: {},
    description:
      'How the request target is read. The proxy normalises it once (percent-encoded unreserved characters decoded, dot ' +
      'segments removed) and sends the origin exactly that; the WAF exclusions and the log go by the same path.',
  },
);

export const RateLimitThreshold = Type.Object(
  {
    requests: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
    periodSeconds: Type.Integer({ minimum: 1, maximum: 86_400 }),
  },
  { additionalProperties: false },
);

export const RateLimiting = Type.Object(
  {
    thresholds: Type.Array(RateLimitThreshold, { minItems: 1, maxItems: 10 }),
    blockSeconds: Type.Integer({ minimum: 1, maximum: 86_400 }),
  },
  {
    additionalProperties: false,
    description: 'Counted per client source IP across all paths. Absent or null: off.',
  },
);

export const GeoFencing = Type.Object(
  {
    mode: Enum(['BLOCK_LISTED', 'ALLOW_LISTED'] as const),
    countries: Type.Array(Enum(ISO_COUNTRY_CODES), {
      minItems: 1,
      uniqueItems: true,
      description: 'ISO 3166-1 alpha-2 country codes.',
    }),
  },
  { additionalProperties: false, description: 'Absent or null: all countries allowed.' },
);

export const ProxyProtocol = Type.Object(
  {
    enabled: Type.Boolean({ default: false }),
    version: Enum([1, 2] as const, { default: 1, description: 'UDP always uses version 2.' }),
  },
  { additionalProperties: false, default: { enabled: false, version: 1 } },
);

export const ConnectionLimits = Type.Object(
  {
    maxConnectionsPerSource: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 512 }),
    maxNewConnectionsPerSecondPerSource: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 200 }),
    maxConnections: Type.Integer({ minimum: 1, maximum: 10_000_000, default: 100_000 }),
  },
  {
    additionalProperties: false,
    default: {},
    description: 'Network-flood caps. A connection over a cap is refused before it reaches the origin.',
  },
);

export const HttpConnectionLimits = Type.Object(
  {
    maxConnectionsPerSource: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1_000_000,
        description: 'Connections open at once from one source (default: TPS_HTTP_MAX_CONNECTIONS_PER_SOURCE, 256).',
      }),
    ),
    maxNewConnectionsPerSecondPerSource: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1_000_000,
        description: 'New connections per second from one source (default: TPS_HTTP_MAX_NEW_CONNECTIONS_PER_SECOND_PER_SOURCE, 100).',
      }),
    ),
    maxConnections: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000_000,
        description: 'Connections open at once to the proxy (default: TPS_HTTP_MAX_CONNECTIONS, 10,000).',
      }),
    ),
  },
  {
    additionalProperties: false,
    description:
      'Connection caps, counted across the edge node (a source is an IPv4 address or an IPv6 /64). A connection over a cap is ' +
      "reset before its TLS handshake and never reaches the origin. Absent (or a cap absent): the operator's defaults.",
  },
);

/** An IPv4 or IPv6 network in CIDR notation (a bare address is its own /32 or /128). */
const IPV4_CIDR =
  '((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(/(3[0-2]|[12]?[0-9]))?';
const IPV6_CIDR = '[0-9A-Fa-f]{0,4}(:[0-9A-Fa-f]{0,4}){2,7}(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?';
export const APP_DDOS_MODES = ['OFF', 'AUTO', 'ALWAYS'] as const;

export const AppDdosExemptions = Type.Object(
  {
    pathPrefixes: Type.Array(Type.String({ pattern: '^/', minLength: 1, maxLength: 256 }), {
      maxItems: 32,
      default: [],
      description:
        'Requests whose path (dot segments resolved) starts with one of these are never challenged, for clients that run no ' +
        'JavaScript (an API, a webhook). A path holding an encoded slash, backslash or dot is never exempted.',
    }),
    userAgents: Type.Array(Type.String({ minLength: 3, maxLength: 256 }), {
      maxItems: 32,
      default: [],
      description:
        'Requests whose User-Agent contains one of these strings are never challenged. A client chooses its User-Agent: an ' +
        'attacker can copy it, so prefer path prefixes and networks.',
    }),
    sourceNetworks: Type.Array(Type.String({ pattern: `^(${IPV4_CIDR}|${IPV6_CIDR})$`, maxLength: 49 }), {
      maxItems: 64,
      default: [],
      description: 'Clients in these networks (CIDR) are never challenged (monitoring, partners).',
    }),
  },
  {
    additionalProperties: false,
    default: {},
    description: 'Clients that are never challenged. They are still counted, limited by rateLimiting and by originRateLimit.',
  },
);

export const AppDdos = Type.Object(
  {
    mode: Enum(APP_DDOS_MODES, {
      default: 'AUTO',
      description:
        'OFF: no detection, no challenge. AUTO: browsers are challenged while an attack is detected. ALWAYS ' +
        '("I\'m under attack"): every client without a clearance is challenged, attack or not.',
    }),
    threshold: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000_000,
        description:
          'Requests per second to the proxy (all clients together) above which an attack is declared, whatever the learned ' +
          'normal rate. Absent: only the learned rate (times factor) decides.',
      }),
    ),
    factor: Type.Optional(
      Type.Number({
        minimum: 1.5,
        maximum: 1000,
        description:
          'An attack is declared when the rate exceeds the learned normal rate times this factor (and the operator minimum, ' +
          'TPS_APP_DDOS_MIN_RATE). Absent: TPS_APP_DDOS_FACTOR (default 4).',
      }),
    ),
    originRateLimit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 10_000_000,
        description:
          'During an attack, at most this many requests per second (cleared and exempted clients together) go to the origin; ' +
          'the rest get 503 with Retry-After. Absent: no cap beyond the challenge.',
      }),
    ),
    exemptions: AppDdosExemptions,
  },
  {
    additionalProperties: false,
    description:
      'Application-layer DDoS protection: detection of floods from many sources together and a JavaScript proof-of-work ' +
      'challenge for clients without a clearance cookie. Absent or null: OFF.',
  },
);

const ReadOnlyStatus = {
  status: Type.Optional(
    Enum(['PROVISIONING', 'ACTIVE', 'ERROR'] as const, {
      readOnly: true,
      description: 'PROVISIONING until every edge node serves the current version; ERROR with statusDetail.',
    }),
  ),
  statusDetail: Type.Optional(
    Nullable(
      Type.String({
        readOnly: true,
        description:
          'Why a configuration is ERROR or PROVISIONING, prefixed by the edge node that says so. An ACTIVE one may carry a ' +
          'detail too: a layer 4 proxy with threatIntelligence enabled on a node that has no threat feed (no source is refused there).',
      }),
    ),
  ),
  ...ReadOnlyTimestamps,
};

export const HttpProxyAttributes = Type.Object(
  {
    frontend: Type.Object(
      {
        ...Frontend,
        certificateId: Type.Optional(
          Nullable(Type.String({ format: 'uuid', description: 'Front-end TLS certificate. Absent or null: plain HTTP.' })),
        ),
        clientCertificateVerification: Type.Optional(Nullable(ClientCertificateVerification)),
      },
      { additionalProperties: false },
    ),
    backend: HttpBackend,
    waf: Type.Optional(Waf),
    requestTarget: Type.Optional(RequestTarget),
    rateLimiting: Type.Optional(Nullable(RateLimiting)),
    geoFencing: Type.Optional(Nullable(GeoFencing)),
    connectionLimits: Type.Optional(Nullable(HttpConnectionLimits)),
    appDdos: Type.Optional(Nullable(AppDdos)),
    ...ReadOnlyStatus,
  },
  { additionalProperties: false },
);

export const L4ProxyAttributes = Type.Object(
  {
    frontend: Type.Object(Frontend, { additionalProperties: false }),
    backend: L4Backend,
    protocols: Type.Array(Enum(['TCP', 'UDP'] as const), {
      minItems: 1,
      maxItems: 2,
      uniqueItems: true,
      default: ['TCP'],
    }),
    proxyProtocol: Type.Optional(ProxyProtocol),
    threatIntelligence: Type.Optional(
      Type.Object(
        { enabled: Type.Boolean({ default: true }) },
        {
          additionalProperties: false,
          default: { enabled: true },
          description:
            "Refuse sources the operator's threat feeds list. The feeds are the operator's (TPS_THREAT_FEEDS); on a node " +
            'without one nothing is refused, and the status says so (ACTIVE with a statusDetail).',
        },
      ),
    ),
    connectionLimits: Type.Optional(ConnectionLimits),
    ...ReadOnlyStatus,
  },
  { additionalProperties: false },
);

export type HttpProxyAttributes = Static<typeof HttpProxyAttributes>;
export type L4ProxyAttributes = Static<typeof L4ProxyAttributes>;
export type AppDdosSettings = Static<typeof AppDdos>;

const proxyData = <T extends typeof HTTP_PROXY | typeof L4_PROXY, A extends typeof HttpProxyAttributes | typeof L4ProxyAttributes>(
  type: T,
  attributes: A,
) =>
  Type.Object(
    {
      type: Type.Literal(type),
      id: Type.Optional(Uuid),
      attributes,
      relationships: AccountRelationship,
    },
    { additionalProperties: false },
  );

export const HttpProxyData = proxyData(HTTP_PROXY, HttpProxyAttributes);
export const L4ProxyData = proxyData(L4_PROXY, L4ProxyAttributes);

/** Body of POST and PUT: a whole traffic configuration, discriminated by `data.type`. */
export const TrafficConfigDocument = Type.Object(
  {
    data: DiscriminatedUnion('type', [HttpProxyData, L4ProxyData]),
  },
  { $id: 'TrafficConfigDocument', additionalProperties: false },
);

/**
 * Body of PATCH: only the attributes to change. Objects are merged into the stored configuration,
 * arrays and scalars replace; the merged result is then validated as a whole document.
 */
export const TrafficConfigPatchDocument = Type.Object(
  {
    data: Type.Object(
      {
        type: Enum([HTTP_PROXY, L4_PROXY] as const),
        id: Type.Optional(Uuid),
        attributes: Type.Record(Type.String(), Type.Unknown()),
      },
      { additionalProperties: false },
    ),
  },
  { $id: 'TrafficConfigPatchDocument', additionalProperties: false },
);

export type TrafficConfigAttributes = HttpProxyAttributes | L4ProxyAttributes;
export type TrafficConfigDocument = Static<typeof TrafficConfigDocument>;
export type TrafficConfigPatchDocument = Static<typeof TrafficConfigPatchDocument>;
