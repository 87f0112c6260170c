/** Engine-wide settings from a rule set's configuration directives (SecRuleEngine, SecRequestBodyLimit ...), with ModSecurity's defaults. */
export interface EngineConfig {
  ruleEngine: 'On' | 'Off' | 'DetectionOnly';
  requestBodyAccess: boolean;
  requestBodyLimit: number;
  requestBodyNoFilesLimit: number | undefined;
  requestBodyLimitAction: 'Reject' | 'ProcessPartial';
  requestBodyJsonDepthLimit: number;
  responseBodyAccess: boolean;
  responseBodyLimit: number;
  responseBodyLimitAction: 'Reject' | 'ProcessPartial';
  responseBodyMimeTypes: string[];
  argumentSeparator: string;
  argumentsLimit: number | undefined;
  pcreMatchLimit: number;
  components: string[];
}

/** ModSecurity v3.0.9's values before any directive. */
export function defaultConfig(): EngineConfig {
  return {
    ruleEngine: 'Off',
    requestBodyAccess: false,
    requestBodyLimit: 134217728,
    requestBodyNoFilesLimit: undefined,
    requestBodyLimitAction: 'Reject',
    requestBodyJsonDepthLimit: 10000,
    responseBodyAccess: false,
    responseBodyLimit: 524288,
    responseBodyLimitAction: 'Reject',
    responseBodyMimeTypes: ['text/plain', 'text/html'],
    argumentSeparator: '&',
    argumentsLimit: undefined,
    pcreMatchLimit: 3000,
    components: [],
  };
}
