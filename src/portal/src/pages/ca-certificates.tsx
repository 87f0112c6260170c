import { useState } from 'preact/hooks';
import { api, ApiFailure } from '../api.ts';
import {
  Badge,
  Card,
  Empty,
  ErrorBoard,
  ErrorSummary,
  Field,
  fieldErrors,
  formatTime,
  Loading,
  PageHeader,
  Problem,
  useLoad,
} from '../ui.tsx';
import { Expiry } from './certificates.tsx';

export function CaCertificatesPage() {
  const cas = useLoad(() => api.caCertificates(), []);
  const [certificate, setCertificate] = useState('');
  const [crlUrl, setCrlUrl] = useState('');
  const [board, setBoard] = useState(new ErrorBoard([]));
  const [problem, setProblem] = useState<Error | null>(null);
  const FIRST_ENTRY_POINTER = '/data/attributes/certificates/0';

  const submit = async (event: Event) => {
    event.preventDefault();
    if (!certificate.trim()) return setBoard(new ErrorBoard([{ pointer: `${FIRST_ENTRY_POINTER}/certificate`, message: 'is required' }]));
    try {
      await api.uploadCaCertificate([{ certificate, ...(crlUrl.trim() && { crlUrl: crlUrl.trim() }) }]);
      setCertificate('');
      setCrlUrl('');
      setBoard(new ErrorBoard([]));
      cas.reload();
    } catch (failure) {
      if (failure instanceof ApiFailure) setBoard(new ErrorBoard(fieldErrors(failure.errors)));
    }
  };

  return (
    <div class="page">
      <PageHeader
        title="CA certificates"
        subtitle="Certificate authorities that validate client certificates (mutual TLS) and origin certificates."
      />
      <div class="grid-2-1">
        <Card title="CA certificates">
          {problem && <Problem error={problem} />}
          {cas.error && <Problem error={cas.error} />}
          {!cas.data && !cas.error && <Loading />}
          {cas.data && cas.data.data.length === 0 && <Empty>No CA certificates yet.</Empty>}
          {cas.data && cas.data.data.length > 0 && (
            <table class="table" data-testid="ca-certificates">
              <thead>
                <tr>
                  <th>Subject</th>
                  <th>Expires</th>
                  <th>Revocation list</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {cas.data.data.map((ca) =>
                  ca.attributes.certificates.map((entry, index) => (
                    <tr>
                      <td>
                        <div class="strong">{entry.subject}</div>
                        <div class="muted small mono" title="SHA-256 fingerprint">
                          {entry.fingerprint.slice(0, 47)}…
                        </div>
                      </td>
                      <td>
                        <Expiry notAfter={entry.notAfter} />
                      </td>
                      <td class="small">
                        {entry.crlUrl ? (
                          <>
                            <div class="mono">{entry.crlUrl}</div>
                            {entry.crl?.error ? (
                              <Badge tone="red" title={entry.crl.error}>
                                fetch failed
                              </Badge>
                            ) : entry.crl?.fetchedAt ? (
                              <span class="muted">fetched {formatTime(entry.crl.fetchedAt)}</span>
                            ) : null}
                          </>
                        ) : (
                          <span class="muted">none</span>
                        )}
                      </td>
                      <td class="right">
                        {index === 0 && (
                          <button
                            type="button"
                            class="btn btn-small btn-ghost"
                            onClick={async () => {
                              setProblem(null);
                              try {
                                await api.deleteCaCertificate(ca.id);
                                cas.reload();
                              } catch (failure) {
                                setProblem(failure as Error);
                              }
                            }}
                          >
                            Delete
                          </button>
                        )}
                      </td>
                    </tr>
                  )),
                )}
              </tbody>
            </table>
          )}
        </Card>
        <Card title="Upload a CA certificate">
          <form onSubmit={submit} noValidate>
            <Field label="CA certificate (PEM)" pointer={`${FIRST_ENTRY_POINTER}/certificate`} board={board}>
              <textarea
                rows={6}
                value={certificate}
                placeholder="-----BEGIN CERTIFICATE-----"
                onInput={(e) => setCertificate(e.currentTarget.value)}
              />
            </Field>
            <Field
              label="CRL URL (optional)"
              pointer={`${FIRST_ENTRY_POINTER}/crlUrl`}
              board={board}
              hint="Fetched and refreshed by the service."
            >
              <input
                type="text"
                value={crlUrl}
                placeholder="http://ca.example.com/ca.crl"
                onInput={(e) => setCrlUrl(e.currentTarget.value)}
              />
            </Field>
            <ErrorSummary board={board} />
            <button class="btn btn-primary" type="submit">
              Upload
            </button>
          </form>
        </Card>
      </div>
    </div>
  );
}
