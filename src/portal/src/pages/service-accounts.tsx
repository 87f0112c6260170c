import { useState } from 'preact/hooks';
import { ApiFailure, portal, type ServiceAccount } from '../api.ts';
import {
  Badge,
  Card,
  CopyButton,
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

const SCOPES = [
  { scope: 'read', help: 'list proxies, certificates, IPs' },
  { scope: 'write', help: 'create, change and delete them' },
  { scope: 'insight', help: 'export WAF and rate-limiting events' },
];

export function ServiceAccountsPage() {
  const accounts = useLoad(() => portal.serviceAccounts(), []);
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<string[]>(['read']);
  const [board, setBoard] = useState(new ErrorBoard([]));
  const [created, setCreated] = useState<(ServiceAccount & { clientSecret: string }) | null>(null);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [problem, setProblem] = useState<Error | null>(null);

  const create = async (event: Event) => {
    event.preventDefault();
    const errors = [];
    if (!name.trim()) errors.push({ pointer: '/name', message: 'is required' });
    if (!scopes.length) errors.push({ pointer: '/scopes', message: 'choose at least one scope' });
    setBoard(new ErrorBoard(errors));
    if (errors.length) return;
    try {
      const answer = await portal.createServiceAccount(name.trim(), scopes);
      setCreated(answer.data);
      setName('');
      accounts.reload();
    } catch (failure) {
      if (failure instanceof ApiFailure) setBoard(new ErrorBoard(fieldErrors(failure.errors)));
      else throw failure;
    }
  };

  const revoke = async (clientId: string) => {
    setProblem(null);
    try {
      await portal.revokeServiceAccount(clientId);
      setConfirming(null);
      accounts.reload();
    } catch (failure) {
      setProblem(failure as Error);
    }
  };

  return (
    <div class="page">
      <PageHeader
        title="Service accounts"
        subtitle="API-only users: a client id and secret that get access tokens from POST /oauth/token."
      />
      {created && (
        <div class="secret-box" role="status" data-testid="new-secret">
          <h2>Service account “{created.name}” created</h2>
          <p class="warning">
            <strong>Copy the client secret now.</strong> It is shown only this once: the service keeps only a hash of it. If it is lost,
            revoke this account and create another.
          </p>
          <dl class="credentials">
            <dt>Client id</dt>
            <dd>
              <code data-testid="new-client-id">{created.clientId}</code> <CopyButton text={created.clientId} />
            </dd>
            <dt>Client secret</dt>
            <dd>
              <code data-testid="new-client-secret">{created.clientSecret}</code>{' '}
              <CopyButton text={created.clientSecret} label="Copy secret" data-testid="copy-secret" />
            </dd>
            <dt>Scopes</dt>
            <dd>{created.scopes.join(', ')}</dd>
          </dl>
          <button type="button" class="btn btn-primary" onClick={() => setCreated(null)} data-testid="secret-stored">
            I have stored the secret
          </button>
        </div>
      )}
      <div class="grid-2-1">
        <Card title="Accounts">
          {problem && <Problem error={problem} />}
          {accounts.error && <Problem error={accounts.error} />}
          {!accounts.data && !accounts.error && <Loading />}
          {accounts.data && accounts.data.data.length === 0 && <Empty>No service accounts yet.</Empty>}
          {accounts.data && accounts.data.data.length > 0 && (
            <table class="table" data-testid="service-accounts">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>Client id</th>
                  <th>Scopes</th>
                  <th>Created</th>
                  <th>Status</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {accounts.data.data.map((account) => (
                  <tr data-client-id={account.clientId}>
                    <td>{account.name}</td>
                    <td>
                      <code class="small">{account.clientId}</code>
                    </td>
                    <td>
                      {account.scopes.map((scope) => (
                        <Badge tone="blue">{scope}</Badge>
                      ))}
                    </td>
                    <td class="nowrap">{formatTime(account.createdAt)}</td>
                    <td>{account.revokedAt ? <Badge tone="gray">revoked</Badge> : <Badge tone="green">active</Badge>}</td>
                    <td class="right">
                      {!account.revokedAt &&
                        (confirming === account.clientId ? (
                          <span class="confirm">
                            Revoke? Its tokens stop working.{' '}
                            <button type="button" class="btn btn-danger btn-small" onClick={() => revoke(account.clientId)}>
                              Revoke
                            </button>{' '}
                            <button type="button" class="btn btn-small" onClick={() => setConfirming(null)}>
                              Keep
                            </button>
                          </span>
                        ) : (
                          <button type="button" class="btn btn-small" onClick={() => setConfirming(account.clientId)}>
                            Revoke…
                          </button>
                        ))}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </Card>
        <Card title="New service account">
          <form onSubmit={create} noValidate>
            <Field label="Name" pointer="/name" board={board}>
              <input id="f--name" value={name} placeholder="ci-deploy" onInput={(e) => setName(e.currentTarget.value)} />
            </Field>
            <Field label="Scopes" pointer="/scopes" board={board}>
              <div class="checks">
                {SCOPES.map((entry) => (
                  <label class="check">
                    <input
                      type="checkbox"
                      name={`scope-${entry.scope}`}
                      checked={scopes.includes(entry.scope)}
                      onChange={(e) =>
                        setScopes(e.currentTarget.checked ? [...scopes, entry.scope] : scopes.filter((scope) => scope !== entry.scope))
                      }
                    />
                    <span>
                      <strong>{entry.scope}</strong> <span class="muted">{entry.help}</span>
                    </span>
                  </label>
                ))}
              </div>
            </Field>
            <ErrorSummary board={board} />
            <button class="btn btn-primary" type="submit">
              Create service account
            </button>
          </form>
        </Card>
      </div>
    </div>
  );
}
