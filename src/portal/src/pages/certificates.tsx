import { useEffect, useState } from 'preact/hooks';
import { api, ApiFailure, type CertificateAttributes, type Resource } from '../api.ts';
import {
  Badge,
  Card,
  daysUntil,
  Empty,
  ErrorBoard,
  ErrorSummary,
  Field,
  fieldErrors,
  formatDate,
  Loading,
  PageHeader,
  Problem,
  StatusBadge,
  useLoad,
} from '../ui.tsx';

/** Certificates expiring within this many days are highlighted. */
export const EXPIRING_SOON_DAYS = 30;

export function Expiry(props: { notAfter: string | undefined }) {
  if (!props.notAfter) return <span class="muted">—</span>;
  const days = daysUntil(props.notAfter);
  const label = days < 0 ? `expired ${-days} days ago` : days === 0 ? 'expires today' : `in ${days} days`;
  return (
    <span class={days < 0 ? 'expiry expired' : days <= EXPIRING_SOON_DAYS ? 'expiry soon' : 'expiry'} data-testid="expiry">
      {formatDate(props.notAfter)} <span class="small">({label})</span>
      {days >= 0 && days <= EXPIRING_SOON_DAYS && (
        <>
          {' '}
          <Badge tone="amber">expiring soon</Badge>
        </>
      )}
      {days < 0 && (
        <>
          {' '}
          <Badge tone="red">expired</Badge>
        </>
      )}
    </span>
  );
}

async function readFileInto(input: HTMLInputElement, set: (text: string) => void) {
  const file = input.files?.[0];
  if (file) set(await file.text());
}

export function CertificatesPage() {
  const certificates = useLoad(() => api.certificates(), []);
  const pending = certificates.data?.data.some((c) => c.attributes.status === 'PENDING');
  useEffect(() => {
    if (!pending) return;
    const timer = setTimeout(certificates.reload, 2000);
    return () => clearTimeout(timer);
  }, [certificates.data]);
  const [problem, setProblem] = useState<Error | null>(null);

  return (
    <div class="page">
      <PageHeader
        title="Certificates"
        subtitle="Front-end TLS certificates: your own chain and key, or issued and renewed by the service (ACME)."
      />
      <Card title="Certificates">
        {problem && <Problem error={problem} />}
        {certificates.error && <Problem error={certificates.error} />}
        {!certificates.data && !certificates.error && <Loading />}
        {certificates.data && certificates.data.data.length === 0 && <Empty>No certificates yet.</Empty>}
        {certificates.data && certificates.data.data.length > 0 && (
          <table class="table" data-testid="certificates">
            <thead>
              <tr>
                <th>Names</th>
                <th>Source</th>
                <th>Status</th>
                <th>Issuer</th>
                <th>Expires</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {certificates.data.data.map((certificate) => (
                <CertificateRow
                  certificate={certificate}
                  onDelete={async () => {
                    setProblem(null);
                    try {
                      await api.deleteCertificate(certificate.id);
                      certificates.reload();
                    } catch (failure) {
                      setProblem(failure as Error);
                    }
                  }}
                />
              ))}
            </tbody>
          </table>
        )}
      </Card>
      <div class="grid-2">
        <UploadCard onDone={certificates.reload} />
        <AcmeCard onDone={certificates.reload} />
      </div>
    </div>
  );
}

function CertificateRow(props: { certificate: Resource<CertificateAttributes>; onDelete: () => void }) {
  const attributes = props.certificate.attributes;
  const [asking, setAsking] = useState(false);
  const days = attributes.notAfter ? daysUntil(attributes.notAfter) : undefined;
  return (
    <tr class={days !== undefined && days <= EXPIRING_SOON_DAYS ? 'row-warning' : ''} data-certificate-id={props.certificate.id}>
      <td>
        <div class="strong">
          {(attributes.subjectAltNames?.length ? attributes.subjectAltNames : attributes.domains).join(', ') || attributes.subject}
        </div>
        <div class="muted small mono">{props.certificate.id}</div>
      </td>
      <td>{attributes.source === 'ACME' ? <Badge tone="blue">issued by the service</Badge> : <Badge tone="gray">uploaded</Badge>}</td>
      <td>
        <StatusBadge status={attributes.status} detail={attributes.statusDetail} />
        {attributes.statusDetail && <div class="small error-text">{attributes.statusDetail}</div>}
      </td>
      <td class="small">{attributes.issuer ?? '—'}</td>
      <td>
        <Expiry notAfter={attributes.notAfter} />
      </td>
      <td class="right">
        {asking ? (
          <span class="confirm">
            <button type="button" class="btn btn-danger btn-small" onClick={props.onDelete}>
              Delete
            </button>{' '}
            <button type="button" class="btn btn-small" onClick={() => setAsking(false)}>
              Keep
            </button>
          </span>
        ) : (
          <button type="button" class="btn btn-small btn-ghost" onClick={() => setAsking(true)}>
            Delete…
          </button>
        )}
      </td>
    </tr>
  );
}

function UploadCard(props: { onDone: () => void }) {
  const [certificate, setCertificate] = useState('');
  const [chain, setChain] = useState('');
  const [key, setKey] = useState('');
  const [board, setBoard] = useState(new ErrorBoard([]));
  const [busy, setBusy] = useState(false);
  const ATTRIBUTES_POINTER = '/data/attributes';
  const submit = async (event: Event) => {
    event.preventDefault();
    const errors = [
      ...(certificate.trim() ? [] : [{ pointer: `${ATTRIBUTES_POINTER}/certificate`, message: 'is required' }]),
      ...(key.trim() ? [] : [{ pointer: `${ATTRIBUTES_POINTER}/privateKey`, message: 'is required' }]),
    ];
    setBoard(new ErrorBoard(errors));
    if (errors.length) return;
    setBusy(true);
    try {
      await api.uploadCertificate({ certificate, privateKey: key, ...(chain.trim() && { intermediateCertificates: chain }) });
      setCertificate('');
      setChain('');
      setKey('');
      props.onDone();
    } catch (failure) {
      if (failure instanceof ApiFailure) setBoard(new ErrorBoard(fieldErrors(failure.errors)));
    } finally {
      setBusy(false);
    }
  };
  return (
    <Card title="Upload a certificate">
      <form onSubmit={submit} noValidate>
        <Field label="Certificate (PEM)" pointer={`${ATTRIBUTES_POINTER}/certificate`} board={board}>
          <textarea
            id="f--data-attributes-certificate"
            rows={4}
            value={certificate}
            placeholder="-----BEGIN CERTIFICATE-----"
            onInput={(e) => setCertificate(e.currentTarget.value)}
          />
          <input type="file" accept=".pem,.crt,.cer" onChange={(e) => readFileInto(e.currentTarget, setCertificate)} />
        </Field>
        <Field label="Intermediate certificates (PEM, optional)" pointer={`${ATTRIBUTES_POINTER}/intermediateCertificates`} board={board}>
          <textarea rows={3} value={chain} onInput={(e) => setChain(e.currentTarget.value)} />
        </Field>
        <Field
          label="Private key (PEM)"
          pointer={`${ATTRIBUTES_POINTER}/privateKey`}
          board={board}
          hint="Encrypted at rest and never shown again."
        >
          <textarea rows={3} value={key} placeholder="-----BEGIN PRIVATE KEY-----" onInput={(e) => setKey(e.currentTarget.value)} />
          <input type="file" accept=".pem,.key" onChange={(e) => readFileInto(e.currentTarget, setKey)} />
        </Field>
        <ErrorSummary board={board} />
        <button class="btn btn-primary" type="submit" disabled={busy}>
          Upload
        </button>
      </form>
    </Card>
  );
}

function AcmeCard(props: { onDone: () => void }) {
  const [domains, setDomains] = useState('');
  const [board, setBoard] = useState(new ErrorBoard([]));
  const DOMAINS_POINTER = '/data/attributes/domains';
  const submit = async (event: Event) => {
    event.preventDefault();
    const list = domains.split(/[\s,]+/).filter(Boolean);
    if (!list.length) return setBoard(new ErrorBoard([{ pointer: DOMAINS_POINTER, message: 'name at least one domain' }]));
    try {
      await api.requestCertificate(list);
      setDomains('');
      setBoard(new ErrorBoard([]));
      props.onDone();
    } catch (failure) {
      if (failure instanceof ApiFailure) setBoard(new ErrorBoard(fieldErrors(failure.errors)));
    }
  };
  return (
    <Card title="Request a certificate from the ACME CA">
      <form onSubmit={submit} noValidate>
        <p class="muted small">
          Each name must point (DNS) to a front-end IP with a proxy on port 80: the CA checks it there (HTTP-01). The certificate is renewed
          by itself every 30 days.
        </p>
        <Field label="Domains" pointer={DOMAINS_POINTER} board={board} deep>
          <input
            type="text"
            value={domains}
            placeholder="shop.example.com, www.shop.example.com"
            onInput={(e) => setDomains(e.currentTarget.value)}
          />
        </Field>
        <ErrorSummary board={board} />
        <button class="btn btn-primary" type="submit">
          Request certificate
        </button>
      </form>
    </Card>
  );
}
