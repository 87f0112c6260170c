/** Small building blocks shared by the pages: routing, loading, fields with their errors, formats. */
import type { ComponentChildren } from 'preact';
import { createContext } from 'preact';
import { useContext, useEffect, useState, useCallback } from 'preact/hooks';
import { ApiFailure, type ApiErrorObject } from './api.ts';

// ---- routing (paths under /portal, query string for filters) --------------------------------

export const BASE = '/portal';

export function currentRoute(): { path: string; query: URLSearchParams } {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) || '/' : '/';
  return { path: path.replace(/\/+$/, '') || '/', query: new URLSearchParams(location.search) };
}

const listeners = new Set<() => void>();
export function navigate(to: string, replace = false): void {
  const url = to.startsWith(BASE) ? to : `${BASE}${to}`;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  for (const listener of listeners) listener();
}
addEventListener('popstate', () => {
  for (const listener of listeners) listener();
});

export function useRoute() {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const update = () => setRoute(currentRoute());
    listeners.add(update);
    return () => void listeners.delete(update);
  }, []);
  return route;
}

export function Link(props: { to: string; class?: string; children: ComponentChildren; title?: string; 'data-testid'?: string }) {
  const href = props.to.startsWith(BASE) ? props.to : `${BASE}${props.to}`;
  return (
    <a
      href={href}
      class={props.class}
      title={props.title}
      data-testid={props['data-testid']}
      onClick={(event) => {
        if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
        event.preventDefault();
        navigate(props.to);
      }}
    >
      {props.children}
    </a>
  );
}

// ---- the session ------------------------------------------------------------------------------

export interface SessionState {
  email: string;
  tenantId: string;
  tenantName: string;
}
export const Session = createContext<SessionState>({ email: '', tenantId: '', tenantName: '' });
export const useSession = () => useContext(Session);

// ---- loading data -----------------------------------------------------------------------------

export function useLoad<T>(
  load: () => Promise<T>,
  deps: unknown[],
): { data: T | undefined; error: ApiFailure | Error | undefined; reload: () => void; loading: boolean } {
  const [state, setState] = useState<{ data: T | undefined; error: Error | undefined; loading: boolean }>({
    data: undefined,
    error: undefined,
    loading: true,
  });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((previous) => ({ ...previous, loading: true }));
    load().then(
      (data) => live && setState({ data, error: undefined, loading: false }),
      (error: Error) => live && setState({ data: undefined, error, loading: false }),
    );
    return () => {
      live = false;
    };
    // The caller's own dependencies and the reload tick say when to load again.
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  return { ...state, reload };
}

export function Loading(props: { what?: string }) {
  return <div class="loading">Loading{props.what ? ` ${props.what}` : ''}…</div>;
}

export function Problem(props: { error: Error }) {
  const errors = props.error instanceof ApiFailure ? props.error.errors : [{ detail: props.error.message, code: 'ERROR' }];
  return (
    <div class="alert alert-error" role="alert">
      {errors.map((error) => (
        <div>
          {error.detail} <span class="muted">({error.code})</span>
        </div>
      ))}
    </div>
  );
}

// ---- forms: errors keyed by JSON pointer --------------------------------------------------------

export interface FieldError {
  pointer: string;
  message: string;
  code?: string;
}

/** The API's errors as field errors: `source.pointer` names the field; the detail loses its leading pointer. */
export function fieldErrors(errors: readonly ApiErrorObject[]): FieldError[] {
  return errors.map((error) => {
    const pointer = error.source?.pointer ?? '';
    const message = pointer && error.detail.startsWith(`${pointer} `) ? error.detail.slice(pointer.length + 1) : error.detail;
    return { pointer, message, code: error.code };
  });
}

/** Collects the pointers that fields render, so that the summary can list the errors no field shows. */
export class ErrorBoard {
  readonly errors: FieldError[];
  readonly shown = new Set<string>();
  readonly shownDeep = new Set<string>();
  constructor(errors: FieldError[]) {
    this.errors = errors;
  }
  /** Errors at `pointer` (and, when deep, inside it: items of an array field). */
  at(pointer: string, deep = false): FieldError[] {
    (deep ? this.shownDeep : this.shown).add(pointer);
    return this.errors.filter((error) => error.pointer === pointer || (deep && error.pointer.startsWith(`${pointer}/`)));
  }
  unplaced(): FieldError[] {
    return this.errors.filter(
      (error) =>
        !this.shown.has(error.pointer) && ![...this.shownDeep].some((p) => error.pointer === p || error.pointer.startsWith(`${p}/`)),
    );
  }
}

export function Field(props: {
  label: string;
  pointer: string;
  board: ErrorBoard;
  hint?: ComponentChildren;
  children: ComponentChildren;
  class?: string;
  deep?: boolean;
}) {
  const errors = props.board.at(props.pointer, props.deep);
  const id = `f-${props.pointer.replace(/[^a-zA-Z0-9]+/g, '-')}`;
  return (
    <div class={`field ${errors.length ? 'has-error' : ''} ${props.class ?? ''}`} data-pointer={props.pointer}>
      <label for={id}>{props.label}</label>
      <FieldId.Provider value={id}>{props.children}</FieldId.Provider>
      {props.hint && <div class="hint">{props.hint}</div>}
      {errors.map((error) => (
        <div class="field-error" role="alert" data-testid={`error ${props.pointer}`}>
          {error.message}
        </div>
      ))}
    </div>
  );
}

const FieldId = createContext('');
export const useFieldId = () => useContext(FieldId);

/** Errors that belong to a section (a parent pointer), shown above it. */
export function SectionErrors(props: { board: ErrorBoard; pointer: string }) {
  const errors = props.board.at(props.pointer);
  if (!errors.length) return null;
  return (
    <div class="alert alert-error" role="alert" data-testid={`error ${props.pointer}`}>
      {errors.map((error) => (
        <div>{error.message}</div>
      ))}
    </div>
  );
}

export function ErrorSummary(props: { board: ErrorBoard }) {
  const unplaced = props.board.unplaced();
  if (!unplaced.length) return null;
  return (
    <div class="alert alert-error" role="alert">
      {unplaced.map((error) => (
        <div>
          {error.pointer && <code>{error.pointer}</code>} {error.message}
        </div>
      ))}
    </div>
  );
}

// ---- small pieces -------------------------------------------------------------------------------

export function Badge(props: {
  tone: 'green' | 'amber' | 'red' | 'gray' | 'blue' | 'orange';
  children: ComponentChildren;
  title?: string;
}) {
  return (
    <span class={`badge badge-${props.tone}`} title={props.title}>
      {props.children}
    </span>
  );
}

export function StatusBadge(props: { status: string | undefined; detail?: string | null }) {
  const tone =
    props.status === 'ACTIVE' || props.status === 'ISSUED'
      ? 'green'
      : props.status === 'ERROR' || props.status === 'FAILED'
        ? 'red'
        : 'amber';
  return (
    <Badge tone={tone} title={props.detail ?? undefined}>
      {props.status ?? 'UNKNOWN'}
    </Badge>
  );
}

export function PageHeader(props: { title: string; subtitle?: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <header class="page-header">
      <div>
        <h1>{props.title}</h1>
        {props.subtitle && <p class="subtitle">{props.subtitle}</p>}
      </div>
      {props.actions && <div class="actions">{props.actions}</div>}
    </header>
  );
}

export function Card(props: {
  title?: ComponentChildren;
  children: ComponentChildren;
  class?: string;
  actions?: ComponentChildren;
  'data-testid'?: string;
}) {
  return (
    <section class={`card ${props.class ?? ''}`} data-testid={props['data-testid']}>
      {(props.title || props.actions) && (
        <div class="card-head">
          {props.title && <h2>{props.title}</h2>}
          {props.actions}
        </div>
      )}
      {props.children}
    </section>
  );
}

export function Empty(props: { children: ComponentChildren }) {
  return <div class="empty">{props.children}</div>;
}

const numberFormat = new Intl.NumberFormat('en');
export const formatNumber = (n: number) => numberFormat.format(n);

const dateTime = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeStyle: 'medium', timeZone: 'UTC' });
export const formatTime = (iso: string | undefined | null) => (iso ? `${dateTime.format(new Date(iso))} UTC` : '—');
const dateOnly = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeZone: 'UTC' });
export const formatDate = (iso: string | undefined | null) => (iso ? dateOnly.format(new Date(iso)) : '—');

const regions = new Intl.DisplayNames(['en'], { type: 'region' });
export function countryName(code: string): string {
  if (!/^[A-Z]{2}$/.test(code)) return code || 'Unknown';
  try {
    return regions.of(code) ?? code;
  } catch {
    return code;
  }
}
/** A country as a small code tag (flags need an emoji font that servers and CI browsers lack). */
export function CountryTag(props: { code: string }) {
  return (
    <span class="cc" title={countryName(props.code)}>
      {props.code || '??'}
    </span>
  );
}

/** Days until an ISO date (negative when past). */
export const daysUntil = (iso: string) => Math.floor((Date.parse(iso) - Date.now()) / 86_400_000);

export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = document.createElement('textarea');
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand('copy');
    area.remove();
    return ok;
  }
}

export function CopyButton(props: { text: string; label?: string; 'data-testid'?: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <button
      type="button"
      class="btn btn-small"
      data-testid={props['data-testid']}
      onClick={async () => {
        setCopied(await copyText(props.text));
        setTimeout(() => setCopied(false), 2000);
      }}
    >
      {copied ? 'Copied' : (props.label ?? 'Copy')}
    </button>
  );
}
