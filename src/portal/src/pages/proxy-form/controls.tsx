/** The proxy form's inputs: each takes the id of the Field it sits in, so its label points at it. */
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { useFieldId } from '../../ui.tsx';
import { numberOrUndefined } from './form-state.ts';

/** A certificate or CA certificate to choose. */
export interface Choice {
  id: string;
  label: string;
}

export function Fieldset(props: { title: string; children: ComponentChildren }) {
  return (
    <fieldset class="fieldset">
      <legend>{props.title}</legend>
      {props.children}
    </fieldset>
  );
}

export function Select(props: { value: string; onChange: (value: string) => void; name?: string; children: ComponentChildren }) {
  const id = useFieldId();
  return (
    <select id={id} name={props.name} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
      {props.children}
    </select>
  );
}

export function TextInput(props: { value: string; onChange: (value: string) => void; name?: string | undefined; placeholder?: string }) {
  const id = useFieldId();
  return (
    <input
      id={id}
      type="text"
      name={props.name}
      value={props.value}
      placeholder={props.placeholder}
      onInput={(e) => props.onChange(e.currentTarget.value)}
    />
  );
}

export function NumberInput(props: {
  value: number | undefined;
  onChange: (value: number | undefined) => void;
  name?: string;
  placeholder?: string;
}) {
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

export function Check(props: { label: string; checked: boolean; onChange: (checked: boolean) => void }) {
  return (
    <label class="check">
      <input type="checkbox" checked={props.checked} onChange={(e) => props.onChange(e.currentTarget.checked)} />
      {props.label}
    </label>
  );
}

export function MultiCheck(props: { choices: Choice[]; value: string[]; onChange: (ids: string[]) => void; empty: ComponentChildren }) {
  if (props.choices.length === 0) return <div class="muted small">{props.empty}</div>;
  return (
    <div class="checks">
      {props.choices.map((choice) => (
        <label class="check">
          <input
            type="checkbox"
            checked={props.value.includes(choice.id)}
            onChange={(e) =>
              props.onChange(e.currentTarget.checked ? [...props.value, choice.id] : props.value.filter((id) => id !== choice.id))
            }
          />
          {choice.label}
        </label>
      ))}
    </div>
  );
}

export function DeleteButton(props: { onConfirm: () => void }) {
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
