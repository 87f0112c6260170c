/** What a layer 4 proxy adds: protocols, PROXY protocol, the threat feed and connection caps. */
import { Card, Field } from '../../ui.tsx';
import { ATTRIBUTES_POINTER, type SectionProps } from './form-state.ts';
import { Check, Fieldset, NumberInput, Select } from './controls.tsx';

export function L4OptionsSection(props: SectionProps) {
  const { attributes, setAttribute, board } = props;
  const protocols: string[] = attributes.protocols ?? ['TCP'];
  const limits = attributes.connectionLimits ?? {};
  return (
    <Card title="Layer 4 options">
      <Field label="Protocols" pointer={`${ATTRIBUTES_POINTER}/protocols`} board={board} deep>
        <div class="checks inline">
          {['TCP', 'UDP'].map((protocol) => (
            <label class="check">
              <input
                type="checkbox"
                name={`protocol-${protocol}`}
                checked={protocols.includes(protocol)}
                onChange={(e) =>
                  setAttribute(['protocols'], e.currentTarget.checked ? [...protocols, protocol] : protocols.filter((p) => p !== protocol))
                }
              />
              {protocol}
            </label>
          ))}
        </div>
      </Field>
      <div class="row">
        <Field
          label="PROXY protocol to the origin"
          pointer={`${ATTRIBUTES_POINTER}/proxyProtocol/version`}
          board={board}
          hint="Passes the client's IP and port to the asset."
        >
          <Select
            value={attributes.proxyProtocol?.enabled ? String(attributes.proxyProtocol.version ?? 1) : ''}
            onChange={(value) =>
              setAttribute(['proxyProtocol'], value ? { enabled: true, version: Number(value) } : { enabled: false, version: 1 })
            }
            name="proxyProtocol"
          >
            <option value="">Off</option>
            <option value="1">Version 1 (text)</option>
            <option value="2">Version 2 (binary)</option>
          </Select>
        </Field>
      </div>
      <Check
        label="Block sources listed in the threat-intelligence feed"
        checked={attributes.threatIntelligence?.enabled !== false}
        onChange={(checked) => setAttribute(['threatIntelligence'], { enabled: checked })}
      />
      <Fieldset title="Connection limits (network floods)">
        <div class="row">
          <Field label="Connections per source" pointer={`${ATTRIBUTES_POINTER}/connectionLimits/maxConnectionsPerSource`} board={board}>
            <NumberInput
              value={limits.maxConnectionsPerSource}
              placeholder="512"
              onChange={(value) => setAttribute(['connectionLimits', 'maxConnectionsPerSource'], value)}
            />
          </Field>
          <Field
            label="New connections / s per source"
            pointer={`${ATTRIBUTES_POINTER}/connectionLimits/maxNewConnectionsPerSecondPerSource`}
            board={board}
          >
            <NumberInput
              value={limits.maxNewConnectionsPerSecondPerSource}
              placeholder="200"
              onChange={(value) => setAttribute(['connectionLimits', 'maxNewConnectionsPerSecondPerSource'], value)}
            />
          </Field>
          <Field label="Connections in all" pointer={`${ATTRIBUTES_POINTER}/connectionLimits/maxConnections`} board={board}>
            <NumberInput
              value={limits.maxConnections}
              placeholder="100000"
              onChange={(value) => setAttribute(['connectionLimits', 'maxConnections'], value)}
            />
          </Field>
        </div>
      </Fieldset>
    </Card>
  );
}
