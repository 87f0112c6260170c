/** What guards an HTTP proxy: the WAF, rate limiting, geo fencing and the application-layer DDoS protection. */
import { Card, Field, SectionErrors } from '../../ui.tsx';
import { ATTRIBUTES_POINTER, listOf, type FormAttributes, type SectionProps } from './form-state.ts';
import { Check, Fieldset, NumberInput, Select, TextInput } from './controls.tsx';

export function HttpProtectionSections(props: SectionProps) {
  const { attributes, setAttribute, board } = props;
  const waf = attributes.waf ?? {};
  const exclusions: FormAttributes[] = waf.ruleExclusions ?? [];
  const rate = attributes.rateLimiting;
  const geo = attributes.geoFencing;
  const ddos = attributes.appDdos;
  const exempt = ddos?.exemptions ?? {};
  return (
    <>
      <Card title="Web application firewall">
        <div class="row">
          <Field label="Mode" pointer={`${ATTRIBUTES_POINTER}/waf/mode`} board={board}>
            <Select value={waf.mode ?? 'BLOCKING'} onChange={(value) => setAttribute(['waf', 'mode'], value)} name="wafMode">
              <option value="BLOCKING">Blocking: stop malicious requests</option>
              <option value="LOGGING">Logging: only record them</option>
            </Select>
          </Field>
          <Field
            label="Paranoia level"
            pointer={`${ATTRIBUTES_POINTER}/waf/paranoiaLevel`}
            board={board}
            hint="1-2 permissive, 3-4 strict (more false positives)."
          >
            <Select
              value={String(waf.paranoiaLevel ?? 1)}
              onChange={(value) => setAttribute(['waf', 'paranoiaLevel'], Number(value))}
              name="paranoiaLevel"
            >
              {[1, 2, 3, 4].map((level) => (
                <option value={String(level)}>{level}</option>
              ))}
            </Select>
          </Field>
          <Field
            label="Anomaly threshold"
            pointer={`${ATTRIBUTES_POINTER}/waf/anomalyThreshold`}
            board={board}
            hint="Score at which a request is blocked (default 5)."
          >
            <NumberInput
              value={waf.anomalyThreshold}
              onChange={(value) => setAttribute(['waf', 'anomalyThreshold'], value)}
              name="anomalyThreshold"
              placeholder="5"
            />
          </Field>
        </div>
        <div class="row">
          <Field
            label="When the WAF cannot keep up"
            pointer={`${ATTRIBUTES_POINTER}/waf/failMode`}
            board={board}
            hint="Overload or engine failure."
          >
            <Select value={waf.failMode ?? 'CLOSED'} onChange={(value) => setAttribute(['waf', 'failMode'], value)} name="wafFailMode">
              <option value="CLOSED">Refuse the request (503)</option>
              <option value="OPEN">Let it through uninspected (counted, logged)</option>
            </Select>
          </Field>
          <Field
            label="Request body inspected (bytes)"
            pointer={`${ATTRIBUTES_POINTER}/waf/requestBodyLimit`}
            board={board}
            hint="Empty: the operator's default (131072). Uploads may be longer."
          >
            <NumberInput
              value={waf.requestBodyLimit}
              onChange={(value) => setAttribute(['waf', 'requestBodyLimit'], value)}
              name="requestBodyLimit"
              placeholder="131072"
            />
          </Field>
          <Field label="Longer bodies" pointer={`${ATTRIBUTES_POINTER}/waf/bodyLimitAction`} board={board}>
            <Select
              value={waf.bodyLimitAction ?? ''}
              onChange={(value) => setAttribute(['waf', 'bodyLimitAction'], value === '' ? undefined : value)}
              name="bodyLimitAction"
            >
              <option value="">Operator's default</option>
              <option value="REJECT">Refuse them (413)</option>
              <option value="PROCESS_PARTIAL">Inspect the first part, pass the rest</option>
            </Select>
          </Field>
        </div>
        <Check
          label="Record the matched data in events (it may contain passwords or tokens)"
          checked={waf.logMatchedData === true}
          onChange={(checked) => setAttribute(['waf', 'logMatchedData'], checked)}
        />
        <Fieldset title="Rule exclusions (false positives)">
          <SectionErrors board={board} pointer={`${ATTRIBUTES_POINTER}/waf/ruleExclusions`} />
          {exclusions.length === 0 && <p class="muted small">None. Create one from an event in the WAF view, or add it here.</p>}
          {exclusions.map((exclusion, index) => (
            <div class="row">
              <Field label="Rule ids" pointer={`${ATTRIBUTES_POINTER}/waf/ruleExclusions/${index}/ruleIds`} board={board} deep>
                <TextInput
                  value={(exclusion.ruleIds ?? []).join(', ')}
                  onChange={(value) =>
                    setAttribute(
                      ['waf', 'ruleExclusions', index, 'ruleIds'],
                      listOf(value).map((id) => (/^\d+$/.test(id) ? Number(id) : id)),
                    )
                  }
                  name={`exclusion-${index}-rules`}
                  placeholder="942100, 942200"
                />
              </Field>
              <Field label="Path prefix" pointer={`${ATTRIBUTES_POINTER}/waf/ruleExclusions/${index}/pathPrefix`} board={board}>
                <TextInput
                  value={exclusion.pathPrefix ?? ''}
                  onChange={(value) => setAttribute(['waf', 'ruleExclusions', index, 'pathPrefix'], value || undefined)}
                  placeholder="/api (all paths when empty)"
                />
              </Field>
              <Field label="Request field" pointer={`${ATTRIBUTES_POINTER}/waf/ruleExclusions/${index}/target`} board={board}>
                <TextInput
                  value={exclusion.target ?? ''}
                  onChange={(value) => setAttribute(['waf', 'ruleExclusions', index, 'target'], value || undefined)}
                  placeholder="ARGS:q (every field when empty)"
                />
              </Field>
              <button
                type="button"
                class="btn btn-small btn-ghost remove"
                title="Remove"
                onClick={() =>
                  setAttribute(
                    ['waf', 'ruleExclusions'],
                    exclusions.filter((_, i) => i !== index),
                  )
                }
              >
                ✕
              </button>
            </div>
          ))}
          <button
            type="button"
            class="btn btn-small"
            onClick={() => setAttribute(['waf', 'ruleExclusions'], [...exclusions, { ruleIds: [] }])}
          >
            Add exclusion
          </button>
        </Fieldset>
      </Card>

      <Card title="Rate limiting">
        <Check
          label="Limit requests per client IP (across all paths)"
          checked={rate != null}
          onChange={(checked) =>
            setAttribute(['rateLimiting'], checked ? { thresholds: [{ requests: 100, periodSeconds: 10 }], blockSeconds: 60 } : undefined)
          }
        />
        {rate && (
          <>
            <SectionErrors board={board} pointer={`${ATTRIBUTES_POINTER}/rateLimiting/thresholds`} />
            {(rate.thresholds ?? []).map((threshold: FormAttributes, index: number) => (
              <div class="row">
                <Field label="Requests" pointer={`${ATTRIBUTES_POINTER}/rateLimiting/thresholds/${index}/requests`} board={board}>
                  <NumberInput
                    value={threshold.requests}
                    onChange={(value) => setAttribute(['rateLimiting', 'thresholds', index, 'requests'], value)}
                    name={`threshold-${index}-requests`}
                  />
                </Field>
                <Field label="per seconds" pointer={`${ATTRIBUTES_POINTER}/rateLimiting/thresholds/${index}/periodSeconds`} board={board}>
                  <NumberInput
                    value={threshold.periodSeconds}
                    onChange={(value) => setAttribute(['rateLimiting', 'thresholds', index, 'periodSeconds'], value)}
                    name={`threshold-${index}-period`}
                  />
                </Field>
                <button
                  type="button"
                  class="btn btn-small btn-ghost remove"
                  title="Remove"
                  onClick={() =>
                    setAttribute(
                      ['rateLimiting', 'thresholds'],
                      rate.thresholds.filter((_: unknown, i: number) => i !== index),
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
                onClick={() =>
                  setAttribute(
                    ['rateLimiting', 'thresholds'],
                    [...(rate.thresholds ?? []), { requests: undefined, periodSeconds: undefined }],
                  )
                }
              >
                Add threshold
              </button>
            </div>
            <Field label="Block for (seconds)" pointer={`${ATTRIBUTES_POINTER}/rateLimiting/blockSeconds`} board={board} class="narrow">
              <NumberInput
                value={rate.blockSeconds}
                onChange={(value) => setAttribute(['rateLimiting', 'blockSeconds'], value)}
                name="blockSeconds"
              />
            </Field>
          </>
        )}
      </Card>

      <Card title="Geo fencing">
        <div class="row">
          <Field label="Countries" pointer={`${ATTRIBUTES_POINTER}/geoFencing/mode`} board={board}>
            <Select
              value={geo?.mode ?? ''}
              onChange={(value) => setAttribute(['geoFencing'], value ? { countries: [], ...geo, mode: value } : undefined)}
              name="geoMode"
            >
              <option value="">All countries allowed</option>
              <option value="BLOCK_LISTED">Block the listed countries</option>
              <option value="ALLOW_LISTED">Allow only the listed countries</option>
            </Select>
          </Field>
          {geo && (
            <Field label="Country codes (ISO 3166-1)" pointer={`${ATTRIBUTES_POINTER}/geoFencing/countries`} board={board} deep>
              <TextInput
                value={(geo.countries ?? []).join(', ')}
                onChange={(value) => setAttribute(['geoFencing', 'countries'], listOf(value.toUpperCase()))}
                name="countries"
                placeholder="DE, FR, NL"
              />
            </Field>
          )}
        </div>
      </Card>

      <Card title="DDoS protection (floods from many sources)">
        <div class="row">
          <Field
            label="Browser check"
            pointer={`${ATTRIBUTES_POINTER}/appDdos/mode`}
            board={board}
            hint="During an attack, visitors without a clearance solve a short check (about a second) before the page loads."
          >
            <Select
              value={ddos?.mode ?? 'OFF'}
              onChange={(value) => setAttribute(['appDdos'], value === 'OFF' ? undefined : { exemptions: {}, ...ddos, mode: value })}
              name="appDdosMode"
            >
              <option value="OFF">Off</option>
              <option value="AUTO">During detected attacks</option>
              <option value="ALWAYS">Always (under attack)</option>
            </Select>
          </Field>
          {ddos && (
            <>
              <Field
                label="Attack threshold (requests/s)"
                pointer={`${ATTRIBUTES_POINTER}/appDdos/threshold`}
                board={board}
                hint="Optional. Without it, several times the learned normal rate."
                class="narrow"
              >
                <NumberInput
                  value={ddos.threshold}
                  onChange={(value) => setAttribute(['appDdos', 'threshold'], value)}
                  name="appDdosThreshold"
                />
              </Field>
              <Field
                label="To the origin at most (requests/s)"
                pointer={`${ATTRIBUTES_POINTER}/appDdos/originRateLimit`}
                board={board}
                hint="Optional, during an attack."
                class="narrow"
              >
                <NumberInput
                  value={ddos.originRateLimit}
                  onChange={(value) => setAttribute(['appDdos', 'originRateLimit'], value)}
                  name="appDdosOriginRateLimit"
                />
              </Field>
            </>
          )}
        </div>
        {ddos && (
          <div class="row">
            <Field
              label="Never checked: path prefixes"
              pointer={`${ATTRIBUTES_POINTER}/appDdos/exemptions/pathPrefixes`}
              board={board}
              hint="Clients that run no JavaScript, such as /api/. Still rate limited."
              deep
            >
              <TextInput
                value={(exempt.pathPrefixes ?? []).join(', ')}
                onChange={(value) => setAttribute(['appDdos', 'exemptions', 'pathPrefixes'], listOf(value))}
                name="appDdosPaths"
                placeholder="/api/, /webhooks/"
              />
            </Field>
            <Field
              label="Source networks"
              pointer={`${ATTRIBUTES_POINTER}/appDdos/exemptions/sourceNetworks`}
              board={board}
              hint="CIDR, such as your monitoring."
              deep
            >
              <TextInput
                value={(exempt.sourceNetworks ?? []).join(', ')}
                onChange={(value) => setAttribute(['appDdos', 'exemptions', 'sourceNetworks'], listOf(value))}
                name="appDdosNetworks"
                placeholder="198.51.100.0/24"
              />
            </Field>
            <Field
              label="User agents containing"
              pointer={`${ATTRIBUTES_POINTER}/appDdos/exemptions/userAgents`}
              board={board}
              hint="Weak: anyone can send any user agent."
              deep
            >
              <TextInput
                value={(exempt.userAgents ?? []).join(', ')}
                onChange={(value) => setAttribute(['appDdos', 'exemptions', 'userAgents'], listOf(value))}
                name="appDdosAgents"
              />
            </Field>
          </div>
        )}
      </Card>
    </>
  );
}
