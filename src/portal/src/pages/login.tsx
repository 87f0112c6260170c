import { useState } from 'preact/hooks';
import { ApiFailure, portal, type SessionInfo } from '../api.ts';

export function LoginPage(props: { onSignedIn: (info: SessionInfo) => void }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError('');
    try {
      props.onSignedIn(await portal.login(email, password));
    } catch (failure) {
      setError(failure instanceof ApiFailure ? (failure.errors[0]?.detail ?? failure.message) : String(failure));
      setBusy(false);
    }
  };

  return (
    <div class="login-screen">
      <form class="login-card" onSubmit={submit} noValidate>
        <div class="brand brand-dark">
          <svg viewBox="0 0 32 32" width="34" height="34" aria-hidden="true">
            <path d="M16 2 4 7v8c0 7.5 5.1 13.4 12 15 6.9-1.6 12-7.5 12-15V7z" fill="#f97316" />
            <path d="m10.5 16 4 4 7-8" stroke="#fff" stroke-width="2.6" fill="none" stroke-linecap="round" stroke-linejoin="round" />
          </svg>
          <span>Traffic protection</span>
        </div>
        <h1>Sign in</h1>
        <p class="muted">
          Your operator creates your account with <code>tps user create</code>.
        </p>
        <div class="field">
          <label for="email">Email</label>
          <input
            id="email"
            name="email"
            type="email"
            autocomplete="username"
            value={email}
            onInput={(e) => setEmail(e.currentTarget.value)}
            required
          />
        </div>
        <div class="field">
          <label for="password">Password</label>
          <input
            id="password"
            name="password"
            type="password"
            autocomplete="current-password"
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
            required
          />
        </div>
        {error && (
          <div class="alert alert-error" role="alert" data-testid="login-error">
            {error}
          </div>
        )}
        <button class="btn btn-primary btn-block" type="submit" disabled={busy || !email || !password}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </div>
  );
}
