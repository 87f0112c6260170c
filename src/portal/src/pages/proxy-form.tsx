/**
 * Create or edit a proxy. The form edits the traffic configuration's attributes as the API names
 * them; each input knows its JSON pointer, so errors (from the schema check here, or from the API)
 * appear beside the field they name. Its sections are in ./proxy-form/.
 */
import { useEffect, useState } from 'preact/hooks';
import { TrafficConfigDocument } from '@tps/model';
import { api, ApiFailure, type IpAttributes, type ProxyAttributes, type Resource } from '../api.ts';
import { validate } from '../validate.ts';
import {
  Card,
  ErrorBoard,
  ErrorSummary,
  fieldErrors,
  Link,
  Loading,
  navigate,
  PageHeader,
  Problem,
  StatusBadge,
  useLoad,
  useSession,
  type FieldError,
} from '../ui.tsx';
import {
  defaultAttributes,
  setIn,
  withoutEmptyFields,
  type FormAttributes,
  type ProxyType,
  type SetAttribute,
} from './proxy-form/form-state.ts';
import { DeleteButton, type Choice } from './proxy-form/controls.tsx';
import { FrontendSection } from './proxy-form/frontend-section.tsx';
import { OriginsSection } from './proxy-form/origins-section.tsx';
import { HttpProtectionSections } from './proxy-form/http-protection.tsx';
import { L4OptionsSection } from './proxy-form/l4-options.tsx';

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
      certificates={certificates.data.map((c) => ({
        id: c.id,
        label: certificateLabel(c.attributes),
        source: c.attributes.source,
        status: c.attributes.status,
      }))}
      caCertificates={caCertificates.data.map((c) => ({
        id: c.id,
        label: c.attributes.certificates.map((entry) => entry.subject).join(', '),
      }))}
    />
  );
}

const certificateLabel = (c: { subject?: string; domains: string[]; source: string; status: string }) =>
  `${c.domains.join(', ') || c.subject || 'certificate'} (${c.source === 'ACME' ? 'issued by the service' : 'uploaded'}${c.status !== 'ISSUED' ? `, ${c.status}` : ''})`;

function ProxyForm(props: {
  proxy: Resource<ProxyAttributes> | undefined;
  ips: Resource<IpAttributes>[];
  certificates: (Choice & { source: string; status: string })[];
  caCertificates: Choice[];
}) {
  const { proxy } = props;
  const firstIpv4 = props.ips.find((ip) => ip.attributes.version === 4)?.attributes.address;
  const [type, setType] = useState<ProxyType>((proxy?.type as ProxyType) ?? 'httpProxy');
  const [attributes, setAttributes] = useState<FormAttributes>(() =>
    proxy ? (withoutEmptyFields(proxy.attributes) as FormAttributes) : defaultAttributes('httpProxy', undefined, firstIpv4),
  );
  const [errors, setErrors] = useState<FieldError[]>([]);
  const [busy, setBusy] = useState(false);
  const [saved, setSaved] = useState<Resource<ProxyAttributes> | undefined>(proxy);
  const board = new ErrorBoard(errors);
  const setAttribute: SetAttribute = (path, value) => setAttributes((current) => setIn(current, path, value));
  const http = type === 'httpProxy';

  // After a save, follow the status until the edge serves the proxy (or reports an error).
  useEffect(() => {
    if (saved?.attributes.status !== 'PROVISIONING') return;
    const timer = setTimeout(() => {
      api.proxy(saved.id).then(
        (answer) => setSaved(answer.data),
        () => undefined,
      );
    }, 1000);
    return () => clearTimeout(timer);
  }, [saved]);

  const submit = async (event: Event) => {
    event.preventDefault();
    const body = { data: { type, attributes: withoutEmptyFields(attributes) } };
    const local = validate(TrafficConfigDocument as unknown as Record<string, unknown>, body);
    setErrors(local);
    if (local.length) return;
    setBusy(true);
    try {
      const answer = proxy
        ? await api.replaceProxy(proxy.id, type, body.data.attributes)
        : await api.createProxy(type, body.data.attributes);
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

  const ownPort = proxy
    ? { port: proxy.attributes.frontend.port, ips: [proxy.attributes.frontend.ipv4, proxy.attributes.frontend.ipv6] }
    : undefined;
  const protocols: string[] = http ? ['TCP'] : (attributes.protocols ?? ['TCP']);

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
        actions={
          <Link to="/proxies" class="btn">
            Back to proxies
          </Link>
        }
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
                      setAttributes((current) => defaultAttributes(kind, current));
                      setErrors([]);
                    }}
                  />
                  <strong>{kind === 'httpProxy' ? 'HTTP proxy' : 'Layer 4 proxy'}</strong>
                  <span class="muted">
                    {kind === 'httpProxy'
                      ? 'TLS, WAF, rate limiting, geo fencing for web assets.'
                      : 'TCP and/or UDP, PROXY protocol, threat-feed blocking.'}
                  </span>
                </label>
              ))}
            </div>
          </Card>
        )}

        <FrontendSection
          attributes={attributes}
          setAttribute={setAttribute}
          board={board}
          http={http}
          ips={props.ips}
          certificates={props.certificates}
          caCertificates={props.caCertificates}
          protocols={protocols}
          ownPort={ownPort}
        />

        <OriginsSection
          attributes={attributes}
          setAttribute={setAttribute}
          board={board}
          http={http}
          certificates={props.certificates}
          caCertificates={props.caCertificates}
        />

        {http ? (
          <HttpProtectionSections attributes={attributes} setAttribute={setAttribute} board={board} />
        ) : (
          <L4OptionsSection attributes={attributes} setAttribute={setAttribute} board={board} />
        )}

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
