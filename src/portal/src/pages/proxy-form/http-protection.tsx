/** What guards an HTTP proxy: the WAF, rate limiting and geo fencing. */
import { Card, Field, SectionErrors } from '../../ui.tsx';
import { ATTRIBUTES_POINTER, listOf, type FormAttributes, type SectionProps } from './form-state.ts';
import { Check, Fieldset, NumberInput, Select, TextInput } from './controls.tsx';

export function HttpProtectionSections(props: SectionProps) {
  const { attributes, setAttribute, board } = props;
  const waf = attributes.waf ?? {};
  const exclusions: FormAttributes[] = waf.ruleExclusions ?? [];
  const rate = attributes.rateLimiting;
  const geo = attributes.geoFencing;
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
    </>
  );
}
