/**
 * What the `tps` command prints. With --json every command prints exactly one JSON object on
 * stdout, its errors included (`{"errors": [...]}`, shaped like the API's JSON:API errors), so a
 * script never has to parse text; without it, plain lines, errors on stderr.
 */

/** Where in the operator's file an error lies (config as code), or which field of a request. */
export interface CliErrorSource {
  /** The JSON:API pointer the API answered, when the error came from the API. */
  pointer?: string;
  file?: string;
  line?: number;
  column?: number;
  /** The place in the file as a path: `trafficConfigs[0].attributes.frontend.port`. */
  path?: string;
}

export interface CliErrorObject {
  /** The HTTP status, when the API answered the error. */
  status?: string;
  code: string;
  detail: string;
  source?: CliErrorSource;
  meta?: Record<string, unknown>;
}

/** A failure the command reports and exits on; nothing else is printed. */
export class CliError extends Error {
  readonly errors: CliErrorObject[];
  readonly exitCode: number;

  constructor(code: string, detail: string, options: { exitCode?: number; meta?: Record<string, unknown> } = {}) {
    super(detail);
    this.errors = [{ code, detail, ...(options.meta && { meta: options.meta }) }];
    this.exitCode = options.exitCode ?? 1;
  }

  static many(errors: CliErrorObject[], exitCode = 1): CliError {
    const error = new CliError(errors[0]?.code ?? 'ERROR', errors[0]?.detail ?? 'failed', { exitCode });
    error.errors.splice(0, 1, ...errors);
    return error;
  }
}

/** Exit codes: 1 the command failed, 2 it was called wrongly (flags, settings). */
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** --json anywhere on the command line: the parser's own errors must be JSON too. */
export function jsonRequested(argv: readonly string[] = process.argv): boolean {
  return argv.slice(2).includes('--json');
}

export function printResult(json: boolean | undefined, value: object, text: string): void {
  process.stdout.write(json ? `${JSON.stringify(value)}\n` : text === '' ? '' : `${text}\n`);
}

/** One error as a line: `file:line:column: path: detail (CODE)`. */
export function errorLine(error: CliErrorObject): string {
  const where = error.source?.file
    ? `${error.source.file}${error.source.line ? `:${error.source.line}:${error.source.column ?? 1}` : ''}: ${error.source.path ? `${error.source.path}: ` : ''}`
    : '';
  return `${where}${error.detail} (${error.code})`;
}

/** Prints a failure as the mode asks and returns the exit code. */
export function reportFailure(json: boolean, errors: CliErrorObject[], exitCode: number): number {
  if (json) process.stdout.write(`${JSON.stringify({ errors })}\n`);
  else for (const error of errors) process.stderr.write(`tps: ${errorLine(error)}\n`);
  return exitCode;
}
