/** The origins of a proxy: their addresses, how one is chosen, and for HTTP proxies the TLS to them. */
import { Card, Field, Link, SectionErrors } from '../../ui.tsx';
import { ATTRIBUTES_POINTER, type SectionProps } from './form-state.ts';
import { Check, Fieldset, MultiCheck, NumberInput, Select, TextInput, type Choice } from './controls.tsx';

export function OriginsSection(
  props: SectionProps & {
    http: boolean;
    certificates: (Choice & { source: string })[];
    caCertificates: Choice[];
  },
) {
  const { attributes, setAttribute, board, http } = props;
  return (
    <Card title="Origins">
      <SectionErrors board={board} pointer={`${ATTRIBUTES_POINTER}/backend/hosts`} />
      {(attributes.backend?.hosts ?? []).map((host: { address?: string; port?: number }, index: number) => (
        <div class="row host-row">
          <Field
            label={index === 0 ? 'Address (IP or DNS name)' : ''}
            pointer={`${ATTRIBUTES_POINTER}/backend/hosts/${index}/address`}
            board={board}
          >
            <TextInput
              value={host.address ?? ''}
              onChange={(value) => setAttribute(['backend', 'hosts', index, 'address'], value)}
              name={`host-${index}-address`}
              placeholder="203.0.113.10 or origin.example.com"
            />
          </Field>
          <Field
            label={index === 0 ? 'Port' : ''}
            pointer={`${ATTRIBUTES_POINTER}/backend/hosts/${index}/port`}
            board={board}
            class="narrow"
          >
            <NumberInput
              value={host.port}
              onChange={(value) => setAttribute(['backend', 'hosts', index, 'port'], value)}
              name={`host-${index}-port`}
            />
          </Field>
          <button
            type="button"
            class="btn btn-small btn-ghost remove"
            title="Remove this origin"
            disabled={attributes.backend.hosts.length === 1}
            onClick={() =>
              setAttribute(
                ['backend', 'hosts'],
                attributes.backend.hosts.filter((_: unknown, i: number) => i !== index),
              )
            }
          >
            ✕
          </button>
        </div>
      ))}
      <div class="row add-row">
        <button
          type="button"
          class="btn btn-small"
          onClick={() => setAttribute(['backend', 'hosts'], [...(attributes.backend?.hosts ?? []), { address: '', port: undefined }])}
        >
          Add origin
        </button>
      </div>
      <Field
        label="Delivery method"
        pointer={`${ATTRIBUTES_POINTER}/backend/deliveryMethod`}
        board={board}
        hint="How the next origin is chosen when there are several."
      >
        <Select
          value={attributes.backend?.deliveryMethod ?? 'LEAST_CONNECTIONS'}
          onChange={(value) => setAttribute(['backend', 'deliveryMethod'], value)}
          name="deliveryMethod"
        >
          <option value="LEAST_CONNECTIONS">Least connections</option>
          <option value="ROUND_ROBIN">Round robin</option>
          <option value="SOURCE_IP_HASH">Source IP hash (sticky)</option>
        </Select>
      </Field>
      {http && (
        <>
          <Check
            label="HTTPS to the origins"
            checked={attributes.backend?.tlsSettings != null}
            onChange={(checked) => setAttribute(['backend', 'tlsSettings'], checked ? {} : undefined)}
          />
          {attributes.backend?.tlsSettings && (
            <Fieldset title="Origin TLS">
              <div class="row">
                <Field
                  label="Verify the origin's certificate"
                  pointer={`${ATTRIBUTES_POINTER}/backend/tlsSettings/verifyCertificate/mode`}
                  board={board}
                >
                  <Select
                    value={attributes.backend.tlsSettings.verifyCertificate?.mode ?? ''}
                    name="verifyMode"
                    onChange={(value) =>
                      setAttribute(
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
                <Field
                  label="Client certificate for the origin (mutual TLS)"
                  pointer={`${ATTRIBUTES_POINTER}/backend/tlsSettings/clientCertificateId`}
                  board={board}
                >
                  <Select
                    value={attributes.backend.tlsSettings.clientCertificateId ?? ''}
                    name="originClientCertificate"
                    onChange={(value) => setAttribute(['backend', 'tlsSettings', 'clientCertificateId'], value || undefined)}
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
              {attributes.backend.tlsSettings.verifyCertificate?.mode === 'CUSTOM_TRUSTSTORE' && (
                <Field
                  label="Trusted CA certificates"
                  pointer={`${ATTRIBUTES_POINTER}/backend/tlsSettings/verifyCertificate/caCertificateIds`}
                  board={board}
                  deep
                >
                  <MultiCheck
                    choices={props.caCertificates}
                    value={attributes.backend.tlsSettings.verifyCertificate.caCertificateIds ?? []}
                    onChange={(ids) => setAttribute(['backend', 'tlsSettings', 'verifyCertificate', 'caCertificateIds'], ids)}
                    empty={
                      <>
                        No CA certificates yet: <Link to="/ca-certificates">upload one</Link>.
                      </>
                    }
                  />
                </Field>
              )}
            </Fieldset>
          )}
        </>
      )}
    </Card>
  );
}
