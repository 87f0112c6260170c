/**
 * The proxy form's data: the traffic configuration's attributes as the API names them, edited as
 * plain JSON (the schema check and the API judge them), and the JSON pointer each input answers to.
 */
import type { ErrorBoard } from '../../ui.tsx';

// The form holds what the user typed, valid or not: any shape until the schema check.
// biome-ignore lint/suspicious/noExplicitAny: the form edits attributes of every proxy type by path; the API's schema checks them
export type FormAttributes = Record<string, any>;
export type ProxyType = 'httpProxy' | 'l4Proxy';
/** Where the attributes sit in a request body: every input's pointer starts here. */
export const ATTRIBUTES_POINTER = '/data/attributes';
const READ_ONLY = ['status', 'statusDetail', 'createdAt', 'updatedAt'];

/** Sets the value at a path of the attributes (undefined removes it). */
export type SetAttribute = (path: (string | number)[], value: unknown) => void;

/** What every section of the form is given. */
export interface SectionProps {
  attributes: FormAttributes;
  setAttribute: SetAttribute;
  board: ErrorBoard;
}

/** A new proxy of `type`: the API's defaults, keeping the front end and origins of `keep`. */
export function defaultAttributes(type: ProxyType, keep?: FormAttributes, ip?: string): FormAttributes {
  const frontend = {
    ipv4: keep?.frontend?.ipv4 ?? ip,
    ipv6: keep?.frontend?.ipv6,
    port: keep?.frontend?.port ?? (type === 'httpProxy' ? 80 : undefined),
  };
  const hosts = keep?.backend?.hosts ?? [{ address: '', port: type === 'httpProxy' ? 80 : undefined }];
  return type === 'httpProxy'
    ? {
        frontend,
        backend: { hosts, deliveryMethod: 'LEAST_CONNECTIONS' },
        waf: { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] },
      }
    : {
        frontend,
        backend: { hosts, deliveryMethod: 'LEAST_CONNECTIONS' },
        protocols: ['TCP'],
        proxyProtocol: { enabled: false, version: 1 },
        threatIntelligence: { enabled: true },
      };
}

/** Sets a nested value immutably; undefined removes the key. */
export function setIn(target: FormAttributes, path: (string | number)[], value: unknown): FormAttributes {
  const [head, ...rest] = path;
  const copy: FormAttributes = (Array.isArray(target) ? [...target] : { ...target }) as FormAttributes;
  if (rest.length === 0) {
    if (value === undefined && !Array.isArray(target)) delete copy[head as string];
    else copy[head as string] = value;
    return copy;
  }
  copy[head as string] = setIn(copy[head as string] ?? (typeof rest[0] === 'number' ? [] : {}), rest, value);
  return copy;
}

/** What is sent: empty text fields and read-only attributes left out, as if not filled in. */
export function withoutEmptyFields(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutEmptyFields);
  if (value && typeof value === 'object') {
    const result: FormAttributes = {};
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined || item === '' || READ_ONLY.includes(key)) continue;
      result[key] = withoutEmptyFields(item);
    }
    return result;
  }
  return value;
}

export const numberOrUndefined = (text: string) => (text.trim() === '' ? undefined : Number(text));
export const listOf = (text: string) =>
  text
    .split(/[\s,]+/)
    .map((item) => item.trim())
    .filter(Boolean);
