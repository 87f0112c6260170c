/**
 * Create or edit a proxy. The form edits the traffic configuration's attributes as the API names
 * them; each input knows its JSON pointer, so errors (from the schema check here, or from the API)
 * appear beside the field they name.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { TrafficConfigDocument } from '@tps/model';
import { api, ApiFailure, type IpAttributes, type ProxyAttributes, type Resource } from '../api.ts';
import { validate } from '../validate.ts';
import {
  Card,
  ErrorBoard,
  ErrorSummary,
  Field,
  fieldErrors,
  Link,
  Loading,
  navigate,
  PageHeader,
  Problem,
  SectionErrors,
  StatusBadge,
  useFieldId,
  useLoad,
  useSession,
  type FieldError,
} from '../ui.tsx';

type Attrs = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
type ProxyType = 'httpProxy' | 'l4Proxy';
const P = '/data/attributes';
const READ_ONLY = ['status', 'statusDetail', 'createdAt', 'updatedAt'];

function defaults(type: ProxyType, keep?: Attrs, ip?: string): Attrs {
  const frontend = { ipv4: keep?.frontend?.ipv4 ?? ip, ipv6: keep?.frontend?.ipv6, port: keep?.frontend?.port ?? (type === 'httpProxy' ? 80 : undefined) };
  const hosts = keep?.backend?.hosts ?? [{ address: '', port: type === 'httpProxy' ? 80 : undefined }];
  return type === 'httpProxy'
    ? { frontend, backend: { hosts, deliveryMethod: 'LEAST_CONNECTIONS' }, waf: { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] } }
    : { frontend, backend: { hosts, deliveryMethod: 'LEAST_CONNECTIONS' }, protocols: ['TCP'], proxyProtocol: { enabled: false, version: 1 }, threatIntelligence: { enabled: true } };
}

/** Sets a nested value immutably; undefined removes the key. */
function setIn(target: Attrs, path: (string | number)[], value: unknown): Attrs {
  const [head, ...rest] = path;
  const copy: Attrs = (Array.isArray(target) ? [...target] : { ...target }) as Attrs;
  if (rest.length === 0) {
    if (value === undefined && !Array.isArray(target)) delete copy[head as string];
    else copy[head as string] = value;
    return copy;
  }
  copy[head as string] = setIn(copy[head as string] ?? (typeof rest[0] === 'number' ? [] : {}), rest, value);
  return copy;
}

/** What is sent: empty text fields left out, as if not filled in. */
function clean(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(clean);
  if (value && typeof value === 'object') {
    const result: Attrs = {};
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined || item === '' || READ_ONLY.includes(key)) continue;
      result[key] = clean(item);
    }
    return result;
  }
  return value;
}

const numberOrUndefined = (text: string) => (text.trim() === '' ? undefined : Number(text));
const listOf = (text: string) =>
  text
    .split(/[\s,]+/)
    .map((item) => item.trim())
    .filter(Boolean);

export function ProxyFormPage(props: { id?: string | undefined }) {
  const session = useSession();
  const editing = props.id !== undefined;
  const loaded = useLoad(
    () =>
      Promise.all([
        editing ? api.proxy(props.id!) : Promise.resolve(undefined),
        api.ips(session.tenantId),
        api.certificates(),
        api.caCertificates(),
      ]),
    [props.id],
  );
  if (loaded.error) return <Problem error={loaded.error} />;
  if (!loaded.data) return <Loading />;
  const [proxy, ips, certificates, caCertificates] = loaded.data;
  // Data of the page before (another proxy, or none): wait for this one.
  if ((proxy?.data.id ?? undefined) !== props.id) return <Loading />;
  return (
    <ProxyForm
      key={props.id ?? 'new'}
      proxy={proxy?.data}
      ips={ips.data}
      certificates={certificates.data.map((c) => ({ id: c.id, label: certificateLabel(c.attributes), source: c.attributes.source, status: c.attributes.status }))}
      caCertificates={caCertificates.data.map((c) => ({ id: c.id, label: c.attributes.certificates.map((entry) => entry.subject).join(', ') }))}
    />
  );
}

const certificateLabel = (c: { subject?: string; domains: string[]; source: string; status: string }) =>
  `${c.domains.join(', ') || c.subject || 'certificate'} (${c.source === 'ACME' ? 'issued by the service' : 'uploaded'}${c.status !== 'ISSUED' ? `, ${c.status}` : ''})`;

interface Choice {
  id: string;
  label: string;
}

function ProxyForm(props: {
  proxy: Resource<ProxyAttributes> | undefined;
  ips: Resource<IpAttributes>[];
  certificates: (Choice & { source: string; status: string })[];
  caCertificates: Choice[];
}) {
  const { proxy } = props;
  const v4 = props.ips.filter((ip) => ip.attributes.version === 4);
  const v6 = props.ips.filter((ip) => ip.attributes.version === 6);
  const [type, setType] = useState<ProxyType>((proxy?.type as ProxyType) ?? 'httpProxy');
  const [attrs, setAttrs] = useState<Attrs>(() =>
    proxy ? (clean(proxy.attributes) as Attrs) : defaults('httpProxy', undefined, v4[0]?.attributes.address),
  );
  const [errors, setErrors] = useState<FieldError[]>([]);
  const [busy, setBusy] = useState(false);
  const [saved, setSaved] = useState<Resource<ProxyAttributes> | undefined>(proxy);
  const board = new ErrorBoard(errors);
  const set = (path: (string | number)[], value: unknown) => setAttrs((current) => setIn(current, path, value));
  const http = type === 'httpProxy';

  // After a save, follow the status until the edge serves the proxy (or reports an error).
  useEffect(() => {
    if (!saved || saved.attributes.status !== 'PROVISIONING') return;
    const timer = setTimeout(() => {
      api.proxy(saved.id).then((answer) => setSaved(answer.data), () => undefined);
    }, 1000);
    return () => clearTimeout(timer);
  }, [saved]);

  const submit = async (event: Event) => {
    event.preventDefault();
    const body = { data: { type, attributes: clean(attrs) } };
    const local = validate(TrafficConfigDocument as unknown as Record<string, unknown>, body);
    setErrors(local);
    if (local.length) return;
    setBusy(true);
    try {
      const answer = proxy ? await api.replaceProxy(proxy.id, type, body.data.attributes) : await api.createProxy(type, body.data.attributes);
      setSaved(answer.data);
      setErrors([]);
      if (!proxy) navigate(`/proxies/${answer.data.id}`, true);
    } catch (failure) {
      if (failure instanceof ApiFailure) setErrors(fieldErrors(failure.errors));
      else setErrors([{ pointer: '', message: String(failure) }]);
    } finally {
      setBusy(false);
    }
  };

  const remove = async () => {
    if (!proxy) return;
    try {
      await api.deleteProxy(proxy.id);
      navigate('/proxies');
    } catch (failure) {
      if (failure instanceof ApiFailure) setErrors(fieldErrors(failure.errors));
    }
  };

  const ownPort = proxy ? { port: proxy.attributes.frontend.port, ips: [proxy.attributes.frontend.ipv4, proxy.attributes.frontend.ipv6] } : undefined;
  const protocols: string[] = http ? ['TCP'] : (attrs.protocols ?? ['TCP']);

  return (
    <div class="page">
      <PageHeader
        title={proxy ? 'Edit proxy' : 'New proxy'}
        subtitle={
          saved ? (
            <span data-testid="saved-status">
              <StatusBadge status={saved.attributes.status} detail={saved.attributes.statusDetail} />{' '}
              {saved.attributes.status === 'PROVISIONING' && 'the edge is starting to serve this version…'}
              {saved.attributes.status === 'ACTIVE' && 'served by every edge node'}
              {saved.attributes.status === 'ERROR' && saved.attributes.statusDetail}
            </span>
          ) : (
            'Choose a front-end IP and a free port, then the origins behind it.'
          )
        }
        actions={<Link to="/proxies" class="btn">Back to proxies</Link>}
      />
      <form class="form" onSubmit={submit} noValidate data-testid="proxy-form">
        {!proxy && (
          <Card title="Kind">
            <div class="kind-choice">
              {(['httpProxy', 'l4Proxy'] as const).map((kind) => (
                <label class={`kind ${type === kind ? 'selected' : ''}`}>
                  <input
                    type="radio"
                    name="type"
                    value={kind}
                    checked={type === kind}
                    onChange={() => {
                      setType(kind);
                      setAttrs((current) => defaults(kind, current));
                      setErrors([]);
                    }}
                  />
                  <strong>{kind === 'httpProxy' ? 'HTTP proxy' : 'Layer 4 proxy'}</strong>
                  <span class="muted">
                    {kind === 'httpProxy' ? 'TLS, WAF, rate limiting, geo fencing for web assets.' : 'TCP and/or UDP, PROXY protocol, threat-feed blocking.'}
                  </span>
                </label>
              ))}
            </div>
          </Card>
        )}

        <Card title="Front end">
          <SectionErrors board={board} pointer={`${P}/frontend`} />
          <div class="row">
            <Field label="IPv4 address" pointer={`${P}/frontend/ipv4`} board={board}>
              <Select value={attrs.frontend?.ipv4 ?? ''} onChange={(value) => set(['frontend', 'ipv4'], value || undefined)} name="ipv4">
                <option value="">— none —</option>
                {v4.map((ip) => (
                  <option value={ip.attributes.address}>{ip.attributes.address}</option>
                ))}
              </Select>
            </Field>
            <Field label="IPv6 address" pointer={`${P}/frontend/ipv6`} board={board}>
              <Select value={attrs.frontend?.ipv6 ?? ''} onChange={(value) => set(['frontend', 'ipv6'], value || undefined)} name="ipv6">
                <option value="">— none —</option>
                {v6.map((ip) => (
                  <option value={ip.attributes.address}>{ip.attributes.address}</option>
                ))}
              </Select>
            </Field>
            <Field
              label="Port"
              pointer={`${P}/frontend/port`}
              board={board}
              hint={<PortHint ips={props.ips} chosen={[attrs.frontend?.ipv4, attrs.frontend?.ipv6]} port={attrs.frontend?.port} protocols={protocols} own={ownPort} onPick={(port) => set(['frontend', 'port'], port)} />}
            >
              <NumberInput value={attrs.frontend?.port} onChange={(value) => set(['frontend', 'port'], value)} name="port" />
            </Field>
          </div>
          {http && (
            <>
              <Field label="TLS certificate" pointer={`${P}/frontend/certificateId`} board={board} hint="None: the proxy speaks plain HTTP.">
                <Select
                  value={attrs.frontend?.certificateId ?? ''}
                  name="certificateId"
                  onChange={(value) => {
                    set(['frontend', 'certificateId'], value || undefined);
                    if (!value) set(['frontend', 'clientCertificateVerification'], undefined);
                  }}
                >
                  <option value="">— none (plain HTTP) —</option>
                  {props.certificates.map((c) => (
                    <option value={c.id}>{c.label}</option>
                  ))}
                </Select>
              </Field>
              {attrs.frontend?.certificateId && (
                <Fieldset title="Client certificates (mutual TLS, client to proxy)">
                  <SectionErrors board={board} pointer={`${P}/frontend/clientCertificateVerification`} />
                  <Field label="Verification" pointer={`${P}/frontend/clientCertificateVerification/mode`} board={board}>
                    <Select
                      value={attrs.frontend?.clientCertificateVerification?.mode ?? ''}
                      name="clientCertificateMode"
                      onChange={(value) =>
                        set(
                          ['frontend', 'clientCertificateVerification'],
                          value ? { caCertificateIds: [], verifyCrl: false, ...attrs.frontend?.clientCertificateVerification, mode: value } : undefined,
                        )
                      }
                    >
                      <option value="">Off</option>
                      <option value="VERIFY_AND_REJECT">Required: reject requests without a valid certificate</option>
                      <option value="VERIFY_AND_FORWARD">Optional: pass the result to the origin</option>
                    </Select>
                  </Field>
                  {attrs.frontend?.clientCertificateVerification && (
                    <>
                      <Field label="Trusted CA certificates" pointer={`${P}/frontend/clientCertificateVerification/caCertificateIds`} board={board} deep>
                        <MultiCheck
                          choices={props.caCertificates}
                          value={attrs.frontend.clientCertificateVerification.caCertificateIds ?? []}
                          onChange={(ids) => set(['frontend', 'clientCertificateVerification', 'caCertificateIds'], ids)}
                          empty={<>No CA certificates yet: <Link to="/ca-certificates">upload one</Link>.</>}
                        />
                      </Field>
                      <Check
                        label="Check revocation lists (CRL) of these CAs"
                        checked={attrs.frontend.clientCertificateVerification.verifyCrl === true}
                        onChange={(checked) => set(['frontend', 'clientCertificateVerification', 'verifyCrl'], checked)}
                      />
                    </>
                  )}
                </Fieldset>
              )}
            </>
          )}
        </Card>

        <Card title="Origins">
          <SectionErrors board={board} pointer={`${P}/backend/hosts`} />
          {(attrs.backend?.hosts ?? []).map((host: { address?: string; port?: number }, index: number) => (
            <div class="row host-row">
              <Field label={index === 0 ? 'Address (IP or DNS name)' : ''} pointer={`${P}/backend/hosts/${index}/address`} board={board}>
                <TextInput value={host.address ?? ''} onChange={(value) => set(['backend', 'hosts', index, 'address'], value)} name={`host-${index}-address`} placeholder="203.0.113.10 or origin.example.com" />
              </Field>
              <Field label={index === 0 ? 'Port' : ''} pointer={`${P}/backend/hosts/${index}/port`} board={board} class="narrow">
                <NumberInput value={host.port} onChange={(value) => set(['backend', 'hosts', index, 'port'], value)} name={`host-${index}-port`} />
              </Field>
              <button
                type="button"
                class="btn btn-small btn-ghost remove"
                title="Remove this origin"
                disabled={attrs.backend.hosts.length === 1}
                onClick={() => set(['backend', 'hosts'], attrs.backend.hosts.filter((_: unknown, i: number) => i !== index))}
              >
                ✕
              </button>
            </div>
          ))}
          <div class="row add-row">
            <button type="button" class="btn btn-small" onClick={() => set(['backend', 'hosts'], [...(attrs.backend?.hosts ?? []), { address: '', port: undefined }])}>
              Add origin
            </button>
          </div>
          <Field label="Delivery method" pointer={`${P}/backend/deliveryMethod`} board={board} hint="How the next origin is chosen when there are several.">
            <Select value={attrs.backend?.deliveryMethod ?? 'LEAST_CONNECTIONS'} onChange={(value) => set(['backend', 'deliveryMethod'], value)} name="deliveryMethod">
              <option value="LEAST_CONNECTIONS">Least connections</option>
              <option value="ROUND_ROBIN">Round robin</option>
              <option value="SOURCE_IP_HASH">Source IP hash (sticky)</option>
            </Select>
          </Field>
          {http && (
            <>
              <Check
                label="HTTPS to the origins"
                checked={attrs.backend?.tlsSettings != null}
                onChange={(checked) => set(['backend', 'tlsSettings'], checked ? {} : undefined)}
              />
              {attrs.backend?.tlsSettings && (
                <Fieldset title="Origin TLS">
                  <div class="row">
                    <Field label="Verify the origin's certificate" pointer={`${P}/backend/tlsSettings/verifyCertificate/mode`} board={board}>
                      <Select
                        value={attrs.backend.tlsSettings.verifyCertificate?.mode ?? ''}
                        name="verifyMode"
                        onChange={(value) =>
                          set(
                            ['backend', 'tlsSettings', 'verifyCertificate'],
                            value === '' ? undefined : value === 'CUSTOM_TRUSTSTORE' ? { mode: value, caCertificateIds: [] } : { mode: value },
                          )
                        }
                      >
                        <option value="">Do not verify</option>
                        <option value="SYSTEM_TRUSTSTORE">With well-known CAs</option>
                        <option value="CUSTOM_TRUSTSTORE">With my CA certificates</option>
                      </Select>
                    </Field>
                    <Field label="Client certificate for the origin (mutual TLS)" pointer={`${P}/backend/tlsSettings/clientCertificateId`} board={board}>
                      <Select
                        value={attrs.backend.tlsSettings.clientCertificateId ?? ''}
                        name="originClientCertificate"
                        onChange={(value) => set(['backend', 'tlsSettings', 'clientCertificateId'], value || undefined)}
                      >
                        <option value="">— none —</option>
                        {props.certificates
                          .filter((c) => c.source === 'CUSTOMER')
                          .map((c) => (
                            <option value={c.id}>{c.label}</option>
                          ))}
                      </Select>
                    </Field>
                  </div>
                  {attrs.backend.tlsSettings.verifyCertificate?.mode === 'CUSTOM_TRUSTSTORE' && (
                    <Field label="Trusted CA certificates" pointer={`${P}/backend/tlsSettings/verifyCertificate/caCertificateIds`} board={board} deep>
                      <MultiCheck
                        choices={props.caCertificates}
                        value={attrs.backend.tlsSettings.verifyCertificate.caCertificateIds ?? []}
                        onChange={(ids) => set(['backend', 'tlsSettings', 'verifyCertificate', 'caCertificateIds'], ids)}
                        empty={<>No CA certificates yet: <Link to="/ca-certificates">upload one</Link>.</>}
                      />
                    </Field>
                  )}
                </Fieldset>
              )}
            </>
          )}
        </Card>

        {http ? <HttpProtection attrs={attrs} set={set} board={board} /> : <L4Options attrs={attrs} set={set} board={board} />}

        <div class="form-actions">
          <ErrorSummary board={board} />
          <div class="buttons">
            <button class="btn btn-primary" type="submit" disabled={busy} data-testid="save-proxy">
              {busy ? 'Saving…' : proxy ? 'Save changes' : 'Create proxy'}
            </button>
            {proxy && <DeleteButton onConfirm={remove} />}
          </div>
        </div>
      </form>
    </div>
  );
}

function HttpProtection(props: { attrs: Attrs; set: (path: (string | number)[], value: unknown) => void; board: ErrorBoard }) {
  const { attrs, set, board } = props;
  const waf = attrs.waf ?? {};
  const exclusions: Attrs[] = waf.ruleExclusions ?? [];
  const rate = attrs.rateLimiting;
  const geo = attrs.geoFencing;
  return (
    <>
      <Card title="Web application firewall">
        <div class="row">
          <Field label="Mode" pointer={`${P}/waf/mode`} board={board}>
            <Select value={waf.mode ?? 'BLOCKING'} onChange={(value) => set(['waf', 'mode'], value)} name="wafMode">
              <option value="BLOCKING">Blocking: stop malicious requests</option>
              <option value="LOGGING">Logging: only record them</option>
            </Select>
          </Field>
          <Field label="Paranoia level" pointer={`${P}/waf/paranoiaLevel`} board={board} hint="1-2 permissive, 3-4 strict (more false positives).">
            <Select value={String(waf.paranoiaLevel ?? 1)} onChange={(value) => set(['waf', 'paranoiaLevel'], Number(value))} name="paranoiaLevel">
              {[1, 2, 3, 4].map((level) => (
                <option value={String(level)}>{level}</option>
              ))}
            </Select>
          </Field>
          <Field label="Anomaly threshold" pointer={`${P}/waf/anomalyThreshold`} board={board} hint="Score at which a request is blocked (default 5).">
            <NumberInput value={waf.anomalyThreshold} onChange={(value) => set(['waf', 'anomalyThreshold'], value)} name="anomalyThreshold" placeholder="5" />
          </Field>
        </div>
        <div class="row">
          <Field label="When the WAF cannot keep up" pointer={`${P}/waf/failMode`} board={board} hint="Overload or engine failure.">
            <Select value={waf.failMode ?? 'CLOSED'} onChange={(value) => set(['waf', 'failMode'], value)} name="wafFailMode">
              <option value="CLOSED">Refuse the request (503)</option>
              <option value="OPEN">Let it through uninspected (counted, logged)</option>
            </Select>
          </Field>
          <Field label="Request body inspected (bytes)" pointer={`${P}/waf/requestBodyLimit`} board={board} hint="Empty: the operator's default (131072). Uploads may be longer.">
            <NumberInput value={waf.requestBodyLimit} onChange={(value) => set(['waf', 'requestBodyLimit'], value)} name="requestBodyLimit" placeholder="131072" />
          </Field>
          <Field label="Longer bodies" pointer={`${P}/waf/bodyLimitAction`} board={board}>
            <Select value={waf.bodyLimitAction ?? ''} onChange={(value) => set(['waf', 'bodyLimitAction'], value === '' ? undefined : value)} name="bodyLimitAction">
              <option value="">Operator's default</option>
              <option value="REJECT">Refuse them (413)</option>
              <option value="PROCESS_PARTIAL">Inspect the first part, pass the rest</option>
            </Select>
          </Field>
        </div>
        <Check
          label="Record the matched data in events (it may contain passwords or tokens)"
          checked={waf.logMatchedData === true}
          onChange={(checked) => set(['waf', 'logMatchedData'], checked)}
        />
        <Fieldset title="Rule exclusions (false positives)">
          <SectionErrors board={board} pointer={`${P}/waf/ruleExclusions`} />
          {exclusions.length === 0 && <p class="muted small">None. Create one from an event in the WAF view, or add it here.</p>}
          {exclusions.map((exclusion, index) => (
            <div class="row">
              <Field label="Rule ids" pointer={`${P}/waf/ruleExclusions/${index}/ruleIds`} board={board} deep>
                <TextInput
                  value={(exclusion.ruleIds ?? []).join(', ')}
                  onChange={(value) => set(['waf', 'ruleExclusions', index, 'ruleIds'], listOf(value).map((id) => (/^\d+$/.test(id) ? Number(id) : id)))}
                  name={`exclusion-${index}-rules`}
                  placeholder="942100, 942200"
                />
              </Field>
              <Field label="Path prefix" pointer={`${P}/waf/ruleExclusions/${index}/pathPrefix`} board={board}>
                <TextInput value={exclusion.pathPrefix ?? ''} onChange={(value) => set(['waf', 'ruleExclusions', index, 'pathPrefix'], value || undefined)} placeholder="/api (all paths when empty)" />
              </Field>
              <Field label="Request field" pointer={`${P}/waf/ruleExclusions/${index}/target`} board={board}>
                <TextInput value={exclusion.target ?? ''} onChange={(value) => set(['waf', 'ruleExclusions', index, 'target'], value || undefined)} placeholder="ARGS:q (every field when empty)" />
              </Field>
              <button type="button" class="btn btn-small btn-ghost remove" title="Remove" onClick={() => set(['waf', 'ruleExclusions'], exclusions.filter((_, i) => i !== index))}>
                ✕
              </button>
            </div>
          ))}
          <button type="button" class="btn btn-small" onClick={() => set(['waf', 'ruleExclusions'], [...exclusions, { ruleIds: [] }])}>
            Add exclusion
          </button>
        </Fieldset>
      </Card>

      <Card title="Rate limiting">
        <Check
          label="Limit requests per client IP (across all paths)"
          checked={rate != null}
          onChange={(checked) => set(['rateLimiting'], checked ? { thresholds: [{ requests: 100, periodSeconds: 10 }], blockSeconds: 60 } : undefined)}
        />
        {rate && (
          <>
            <SectionErrors board={board} pointer={`${P}/rateLimiting/thresholds`} />
            {(rate.thresholds ?? []).map((threshold: Attrs, index: number) => (
              <div class="row">
                <Field label="Requests" pointer={`${P}/rateLimiting/thresholds/${index}/requests`} board={board}>
                  <NumberInput value={threshold.requests} onChange={(value) => set(['rateLimiting', 'thresholds', index, 'requests'], value)} name={`threshold-${index}-requests`} />
                </Field>
                <Field label="per seconds" pointer={`${P}/rateLimiting/thresholds/${index}/periodSeconds`} board={board}>
                  <NumberInput value={threshold.periodSeconds} onChange={(value) => set(['rateLimiting', 'thresholds', index, 'periodSeconds'], value)} name={`threshold-${index}-period`} />
                </Field>
                <button
                  type="button"
                  class="btn btn-small btn-ghost remove"
                  title="Remove"
                  onClick={() => set(['rateLimiting', 'thresholds'], rate.thresholds.filter((_: unknown, i: number) => i !== index))}
                >
                  ✕
                </button>
              </div>
            ))}
            <div class="row add-row">
              <button type="button" class="btn btn-small" onClick={() => set(['rateLimiting', 'thresholds'], [...(rate.thresholds ?? []), { requests: undefined, periodSeconds: undefined }])}>
                Add threshold
              </button>
            </div>
            <Field label="Block for (seconds)" pointer={`${P}/rateLimiting/blockSeconds`} board={board} class="narrow">
              <NumberInput value={rate.blockSeconds} onChange={(value) => set(['rateLimiting', 'blockSeconds'], value)} name="blockSeconds" />
            </Field>
          </>
        )}
      </Card>

      <Card title="Geo fencing">
        <div class="row">
          <Field label="Countries" pointer={`${P}/geoFencing/mode`} board={board}>
            <Select value={geo?.mode ?? ''} onChange={(value) => set(['geoFencing'], value ? { countries: [], ...geo, mode: value } : undefined)} name="geoMode">
              <option value="">All countries allowed</option>
              <option value="BLOCK_LISTED">Block the listed countries</option>
              <option value="ALLOW_LISTED">Allow only the listed countries</option>
            </Select>
          </Field>
          {geo && (
            <Field label="Country codes (ISO 3166-1)" pointer={`${P}/geoFencing/countries`} board={board} deep>
              <TextInput value={(geo.countries ?? []).join(', ')} onChange={(value) => set(['geoFencing', 'countries'], listOf(value.toUpperCase()))} name="countries" placeholder="DE, FR, NL" />
            </Field>
          )}
        </div>
      </Card>
    </>
  );
}

function L4Options(props: { attrs: Attrs; set: (path: (string | number)[], value: unknown) => void; board: ErrorBoard }) {
  const { attrs, set, board } = props;
  const protocols: string[] = attrs.protocols ?? ['TCP'];
  const limits = attrs.connectionLimits ?? {};
  return (
    <Card title="Layer 4 options">
      <Field label="Protocols" pointer={`${P}/protocols`} board={board} deep>
        <div class="checks inline">
          {['TCP', 'UDP'].map((protocol) => (
            <label class="check">
              <input
                type="checkbox"
                name={`protocol-${protocol}`}
                checked={protocols.includes(protocol)}
                onChange={(e) => set(['protocols'], e.currentTarget.checked ? [...protocols, protocol] : protocols.filter((p) => p !== protocol))}
              />
              {protocol}
            </label>
          ))}
        </div>
      </Field>
      <div class="row">
        <Field label="PROXY protocol to the origin" pointer={`${P}/proxyProtocol/version`} board={board} hint="Passes the client's IP and port to the asset.">
          <Select
            value={attrs.proxyProtocol?.enabled ? String(attrs.proxyProtocol.version ?? 1) : ''}
            onChange={(value) => set(['proxyProtocol'], value ? { enabled: true, version: Number(value) } : { enabled: false, version: 1 })}
            name="proxyProtocol"
          >
            <option value="">Off</option>
            <option value="1">Version 1 (text)</option>
            <option value="2">Version 2 (binary)</option>
          </Select>
        </Field>
      </div>
      <Check
        label="Block sources listed in the threat-intelligence feed"
        checked={attrs.threatIntelligence?.enabled !== false}
        onChange={(checked) => set(['threatIntelligence'], { enabled: checked })}
      />
      <Fieldset title="Connection limits (network floods)">
        <div class="row">
          <Field label="Connections per source" pointer={`${P}/connectionLimits/maxConnectionsPerSource`} board={board}>
            <NumberInput value={limits.maxConnectionsPerSource} placeholder="512" onChange={(value) => set(['connectionLimits', 'maxConnectionsPerSource'], value)} />
          </Field>
          <Field label="New connections / s per source" pointer={`${P}/connectionLimits/maxNewConnectionsPerSecondPerSource`} board={board}>
            <NumberInput value={limits.maxNewConnectionsPerSecondPerSource} placeholder="200" onChange={(value) => set(['connectionLimits', 'maxNewConnectionsPerSecondPerSource'], value)} />
          </Field>
          <Field label="Connections in all" pointer={`${P}/connectionLimits/maxConnections`} board={board}>
            <NumberInput value={limits.maxConnections} placeholder="100000" onChange={(value) => set(['connectionLimits', 'maxConnections'], value)} />
          </Field>
        </div>
      </Fieldset>
    </Card>
  );
}

/** Which ports are taken on the chosen IPs, and a free one to pick. */
function PortHint(props: {
  ips: Resource<IpAttributes>[];
  chosen: (string | undefined)[];
  port: number | undefined;
  protocols: string[];
  own: { port: number; ips: (string | undefined)[] } | undefined;
  onPick: (port: number) => void;
}) {
  const chosen = props.ips.filter((ip) => props.chosen.includes(ip.attributes.address));
  const taken = useMemo(() => {
    const ports = new Map<string, Set<number>>();
    for (const ip of chosen) {
      const set = new Set<number>();
      for (const assigned of ip.attributes.assignedPorts) {
        const mine = props.own && props.own.port === assigned.port && props.own.ips.includes(ip.attributes.address);
        if (!mine && props.protocols.includes(assigned.protocol)) set.add(assigned.port);
      }
      ports.set(ip.attributes.address, set);
    }
    return ports;
  }, [chosen.map((ip) => ip.id).join(), props.protocols.join()]);
  if (chosen.length === 0) return <span>Choose an IP to see its free ports.</span>;
  const isFree = (port: number) => [...taken.values()].every((set) => !set.has(port));
  const suggestions: number[] = [];
  for (const candidate of [80, 443, 8080, 8443, ...(props.port ? [props.port + 1, props.port + 2] : [])]) {
    if (candidate <= 65535 && isFree(candidate) && candidate !== props.port && !suggestions.includes(candidate)) suggestions.push(candidate);
  }
  const allTaken = [...new Set([...taken.values()].flatMap((set) => [...set]))].sort((a, b) => a - b);
  return (
    <span data-testid="port-hint">
      {props.port !== undefined && Number.isInteger(props.port) && props.port >= 1 && props.port <= 65535 && (
        isFree(props.port) ? (
          <span class="ok-text">Port {props.port} is free on {chosen.map((ip) => ip.attributes.address).join(' and ')}. </span>
        ) : (
          <span class="error-text">Port {props.port} is taken on {[...taken].filter(([, set]) => set.has(props.port!)).map(([ip]) => ip).join(' and ')}. </span>
        )
      )}
      {allTaken.length > 0 ? <>In use: {allTaken.slice(0, 12).join(', ')}{allTaken.length > 12 ? '…' : ''}. </> : <>No port is in use there yet. </>}
      {suggestions.length > 0 && (
        <>
          Free:{' '}
          {suggestions.slice(0, 4).map((port) => (
            <button type="button" class="link-button" onClick={() => props.onPick(port)}>
              {port}
            </button>
          ))}
        </>
      )}
    </span>
  );
}

function Fieldset(props: { title: string; children: ComponentChildren }) {
  return (
    <fieldset class="fieldset">
      <legend>{props.title}</legend>
      {props.children}
    </fieldset>
  );
}

function Select(props: { value: string; onChange: (value: string) => void; name?: string; children: ComponentChildren }) {
  const id = useFieldId();
  return (
    <select id={id} name={props.name} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
      {props.children}
    </select>
  );
}

function TextInput(props: { value: string; onChange: (value: string) => void; name?: string | undefined; placeholder?: string }) {
  const id = useFieldId();
  return <input id={id} type="text" name={props.name} value={props.value} placeholder={props.placeholder} onInput={(e) => props.onChange(e.currentTarget.value)} />;
}

function NumberInput(props: { value: number | undefined; onChange: (value: number | undefined) => void; name?: string; placeholder?: string }) {
  const id = useFieldId();
  return (
    <input
      id={id}
      type="text"
      inputMode="numeric"
      name={props.name}
      value={props.value === undefined || Number.isNaN(props.value) ? '' : String(props.value)}
      placeholder={props.placeholder}
      onInput={(e) => props.onChange(numberOrUndefined(e.currentTarget.value))}
    />
  );
}

function Check(props: { label: string; checked: boolean; onChange: (checked: boolean) => void }) {
  return (
    <label class="check">
      <input type="checkbox" checked={props.checked} onChange={(e) => props.onChange(e.currentTarget.checked)} />
      {props.label}
    </label>
  );
}

function MultiCheck(props: { choices: Choice[]; value: string[]; onChange: (ids: string[]) => void; empty: ComponentChildren }) {
  if (props.choices.length === 0) return <div class="muted small">{props.empty}</div>;
  return (
    <div class="checks">
      {props.choices.map((choice) => (
        <label class="check">
          <input
            type="checkbox"
            checked={props.value.includes(choice.id)}
            onChange={(e) => props.onChange(e.currentTarget.checked ? [...props.value, choice.id] : props.value.filter((id) => id !== choice.id))}
          />
          {choice.label}
        </label>
      ))}
    </div>
  );
}

function DeleteButton(props: { onConfirm: () => void }) {
  const [asking, setAsking] = useState(false);
  return asking ? (
    <span class="confirm">
      Delete this proxy and free its port?{' '}
      <button type="button" class="btn btn-danger" onClick={props.onConfirm}>
        Delete
      </button>{' '}
      <button type="button" class="btn" onClick={() => setAsking(false)}>
        Keep
      </button>
    </span>
  ) : (
    <button type="button" class="btn btn-ghost danger-text" onClick={() => setAsking(true)}>
      Delete proxy…
    </button>
  );
}
