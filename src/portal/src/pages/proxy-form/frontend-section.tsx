/** The front end of a proxy: its IPs and port, and for HTTP proxies its certificate and client certificate checks. */
import type { IpAttributes, Resource } from '../../api.ts';
import { Card, Field, Link, SectionErrors } from '../../ui.tsx';
import { ATTRIBUTES_POINTER, type SectionProps } from './form-state.ts';
import { Check, Fieldset, MultiCheck, NumberInput, Select, type Choice } from './controls.tsx';
import { PortHint } from './port-hint.tsx';

export function FrontendSection(
  props: SectionProps & {
    http: boolean;
    ips: Resource<IpAttributes>[];
    certificates: Choice[];
    caCertificates: Choice[];
    /** Protocols the proxy listens with: the ports taken for them are shown. */
    protocols: string[];
    /** The port and IPs the proxy being edited holds already (not "taken" for it). */
    ownPort: { port: number; ips: (string | undefined)[] } | undefined;
  },
) {
  const { attributes, setAttribute, board, http } = props;
  const v4 = props.ips.filter((ip) => ip.attributes.version === 4);
  const v6 = props.ips.filter((ip) => ip.attributes.version === 6);
  return (
    <Card title="Front end">
      <SectionErrors board={board} pointer={`${ATTRIBUTES_POINTER}/frontend`} />
      <div class="row">
        <Field label="IPv4 address" pointer={`${ATTRIBUTES_POINTER}/frontend/ipv4`} board={board}>
          <Select
            value={attributes.frontend?.ipv4 ?? ''}
            onChange={(value) => setAttribute(['frontend', 'ipv4'], value || undefined)}
            name="ipv4"
          >
            <option value="">— none —</option>
            {v4.map((ip) => (
              <option value={ip.attributes.address}>{ip.attributes.address}</option>
            ))}
          </Select>
        </Field>
        <Field label="IPv6 address" pointer={`${ATTRIBUTES_POINTER}/frontend/ipv6`} board={board}>
          <Select
            value={attributes.frontend?.ipv6 ?? ''}
            onChange={(value) => setAttribute(['frontend', 'ipv6'], value || undefined)}
            name="ipv6"
          >
            <option value="">— none —</option>
            {v6.map((ip) => (
              <option value={ip.attributes.address}>{ip.attributes.address}</option>
            ))}
          </Select>
        </Field>
        <Field
          label="Port"
          pointer={`${ATTRIBUTES_POINTER}/frontend/port`}
          board={board}
          hint={
            <PortHint
              ips={props.ips}
              chosen={[attributes.frontend?.ipv4, attributes.frontend?.ipv6]}
              port={attributes.frontend?.port}
              protocols={props.protocols}
              own={props.ownPort}
              onPick={(port) => setAttribute(['frontend', 'port'], port)}
            />
          }
        >
          <NumberInput value={attributes.frontend?.port} onChange={(value) => setAttribute(['frontend', 'port'], value)} name="port" />
        </Field>
      </div>
      {http && (
        <>
          <Field
            label="TLS certificate"
            pointer={`${ATTRIBUTES_POINTER}/frontend/certificateId`}
            board={board}
            hint="None: the proxy speaks plain HTTP."
          >
            <Select
              value={attributes.frontend?.certificateId ?? ''}
              name="certificateId"
              onChange={(value) => {
                setAttribute(['frontend', 'certificateId'], value || undefined);
                if (!value) setAttribute(['frontend', 'clientCertificateVerification'], undefined);
              }}
            >
              <option value="">— none (plain HTTP) —</option>
              {props.certificates.map((c) => (
                <option value={c.id}>{c.label}</option>
              ))}
            </Select>
          </Field>
          {attributes.frontend?.certificateId && (
            <Fieldset title="Client certificates (mutual TLS, client to proxy)">
              <SectionErrors board={board} pointer={`${ATTRIBUTES_POINTER}/frontend/clientCertificateVerification`} />
              <Field label="Verification" pointer={`${ATTRIBUTES_POINTER}/frontend/clientCertificateVerification/mode`} board={board}>
                <Select
                  value={attributes.frontend?.clientCertificateVerification?.mode ?? ''}
                  name="clientCertificateMode"
                  onChange={(value) =>
                    setAttribute(
                      ['frontend', 'clientCertificateVerification'],
                      value
                        ? { caCertificateIds: [], verifyCrl: false, ...attributes.frontend?.clientCertificateVerification, mode: value }
                        : undefined,
                    )
                  }
                >
                  <option value="">Off</option>
                  <option value="VERIFY_AND_REJECT">Required: reject requests without a valid certificate</option>
                  <option value="VERIFY_AND_FORWARD">Optional: pass the result to the origin</option>
                </Select>
              </Field>
              {attributes.frontend?.clientCertificateVerification && (
                <>
                  <Field
                    label="Trusted CA certificates"
                    pointer={`${ATTRIBUTES_POINTER}/frontend/clientCertificateVerification/caCertificateIds`}
                    board={board}
                    deep
                  >
                    <MultiCheck
                      choices={props.caCertificates}
                      value={attributes.frontend.clientCertificateVerification.caCertificateIds ?? []}
                      onChange={(ids) => setAttribute(['frontend', 'clientCertificateVerification', 'caCertificateIds'], ids)}
                      empty={
                        <>
                          No CA certificates yet: <Link to="/ca-certificates">upload one</Link>.
                        </>
                      }
                    />
                  </Field>
                  <Check
                    label="Check revocation lists (CRL) of these CAs"
                    checked={attributes.frontend.clientCertificateVerification.verifyCrl === true}
                    onChange={(checked) => setAttribute(['frontend', 'clientCertificateVerification', 'verifyCrl'], checked)}
                  />
                </>
              )}
            </Fieldset>
          )}
        </>
      )}
    </Card>
  );
}
