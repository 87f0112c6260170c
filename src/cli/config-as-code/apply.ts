/**
 * `tps apply -f FILE [--dry-run]`: makes the tenant's state equal to the file through the public
 * API. The whole file is checked first (its form, the API's schemas, names, front-end IPs, clashes
 * inside the file); with any problem nothing is sent. A refusal of the API while changes are made
 * stops the run there, its error pointing into the file; running again after the fix goes on from
 * the state then reached, as every run starts by comparing.
 */
import type { ApiClientSettings } from '../../config/settings.ts';
import { CliError, type CliErrorObject } from '../output.ts';
import { ApiCallError, ApiSession } from './api-client.ts';
import { formatPath, loadConfigFile, pointerSegments, detailWithoutPointer, type ConfigFile } from './file.ts';
import { isPending, planChanges } from './plan.ts';
import type { AttributeChange, Change, FilePath, FileProblem, PendingReference } from './types.ts';

export interface ChangeReport {
  action: 'create' | 'update' | 'delete';
  kind: Change['kind'];
  label: string;
  /** The resource's id: of the resource changed or deleted, or the one created (after a run). */
  id?: string;
  /** The file's name of a created certificate or CA certificate. */
  key?: string;
  /** Position of the proxy in the file's trafficConfigs. */
  index?: number;
  attributeChanges?: AttributeChange[];
}

export interface ApplyReport {
  file: string;
  tenantId: string;
  dryRun: boolean;
  changes: ChangeReport[];
  summary: { create: number; update: number; delete: number; unchanged: number };
}

export async function applyFile(options: { file: string; dryRun: boolean; settings: ApiClientSettings }): Promise<ApplyReport> {
  const file = loadConfigFile(options.file);
  if (file.problems.length > 0 || !file.state) throw CliError.many(problemErrors(file, file.problems));
  const session = await ApiSession.connect(options.settings);
  const plan = planChanges(file.state, await session.currentState());
  if (plan.problems.length > 0) throw CliError.many(problemErrors(file, plan.problems));

  const reports = plan.changes.map(reportOf);
  const report: ApplyReport = {
    file: options.file,
    tenantId: session.tenantId,
    dryRun: options.dryRun,
    changes: reports,
    summary: {
      create: plan.changes.filter((change) => change.action === 'create').length,
      update: plan.changes.filter((change) => change.action === 'update').length,
      delete: plan.changes.filter((change) => change.action === 'delete').length,
      unchanged: plan.unchanged,
    },
  };
  if (options.dryRun) return report;

  const created = new Map<string, string>();
  for (const [position, change] of plan.changes.entries()) {
    try {
      const id = await execute(session, change, created);
      if (id !== undefined) reports[position]!.id = id;
    } catch (error) {
      if (!(error instanceof ApiCallError)) throw error;
      const errors = apiErrors(file, change, error);
      const made = reports.slice(0, position);
      errors[0]!.meta = { changesMade: made, changesNotMade: reports.slice(position) };
      errors.push({
        code: 'APPLY_INCOMPLETE',
        detail: `the API refused "${change.label}"; ${made.length} of ${reports.length} change(s) were made before it${made.length ? ` (${made.map((item) => item.label).join('; ')})` : ''}: fix the file and run tps apply again`,
      });
      throw CliError.many(errors);
    }
  }
  return report;
}

async function execute(session: ApiSession, change: Change, created: Map<string, string>): Promise<string | undefined> {
  const resolve = (value: unknown): unknown => {
    if (isPending(value)) return created.get(pendingKey(value));
    if (Array.isArray(value)) return value.map(resolve);
    if (typeof value === 'object' && value !== null)
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, resolve(item)]));
    return value;
  };
  const id = (document: { data: { id: string } }) => document.data.id;
  switch (change.kind) {
    case 'caCertificate': {
      if (change.action === 'delete') return void (await session.call('DELETE', `/api/v2/traffic-mgmt/ca-certificates/${change.id}`));
      const document = await session.call<{ data: { id: string } }>('POST', '/api/v2/traffic-mgmt/ca-certificates', {
        data: { type: 'caCertificate', attributes: { certificates: change.entry.certificates } },
      });
      created.set(pendingKey({ pending: 'caCertificate', key: change.key }), id(document));
      return id(document);
    }
    case 'certificate': {
      if (change.action === 'delete') return void (await session.call('DELETE', `/api/v2/traffic-mgmt/certificates/${change.id}`));
      const { entry } = change;
      const document = entry.domains
        ? await session.call<{ data: { id: string } }>('POST', '/api/v2/traffic-mgmt/certificates/lets-encrypt', {
            data: { type: 'certificate', attributes: { domains: entry.domains } },
          })
        : await session.call<{ data: { id: string } }>('POST', '/api/v2/traffic-mgmt/certificates/pem', {
            data: {
              type: 'certificate',
              attributes: {
                certificate: entry.upload!.certificate,
                ...(entry.upload!.intermediateCertificates !== undefined && {
                  intermediateCertificates: entry.upload!.intermediateCertificates,
                }),
                privateKey: entry.upload!.privateKey,
              },
            },
          });
      created.set(pendingKey({ pending: 'certificate', key: change.key }), id(document));
      return id(document);
    }
    case 'trafficConfig': {
      if (change.action === 'delete') return void (await session.call('DELETE', `/api/v2/traffic-mgmt/traffic-configs/${change.id}`));
      const body = { data: { type: change.type, attributes: resolve(change.attributes) } };
      if (change.action === 'update') {
        await session.call('PUT', `/api/v2/traffic-mgmt/traffic-configs/${change.id}`, { data: { ...body.data, id: change.id } });
        return change.id;
      }
      return id(await session.call<{ data: { id: string } }>('POST', '/api/v2/traffic-mgmt/traffic-configs', body));
    }
  }
}

const pendingKey = (reference: PendingReference) => `${reference.pending}:${reference.key}`;

function reportOf(change: Change): ChangeReport {
  const report: ChangeReport = { action: change.action, kind: change.kind, label: change.label };
  if ('id' in change) report.id = change.id;
  if ('key' in change) report.key = change.key;
  if ('index' in change) report.index = change.index;
  if (change.action === 'update') report.attributeChanges = change.changes;
  return report;
}

/** The file's problems as CLI errors: each with its file, line, column and path. */
export function problemErrors(file: ConfigFile, problems: readonly FileProblem[]): CliErrorObject[] {
  return problems.map((problem) => {
    const position = problem.position ?? file.locate(problem.path);
    return {
      ...(problem.status !== undefined && { status: problem.status }),
      code: problem.code,
      detail: problem.detail,
      source: {
        ...(problem.pointer !== undefined && { pointer: problem.pointer }),
        file: file.name,
        ...(position && { line: position.line, column: position.column }),
        ...(problem.path.length > 0 && { path: formatPath(problem.path) }),
      },
    };
  });
}

/** The API's errors about a change, their pointers mapped back to the entry of the file they concern. */
function apiErrors(file: ConfigFile, change: Change, error: ApiCallError): CliErrorObject[] {
  const base = entryPath(change);
  const problems: FileProblem[] = error.errors.map((apiError) => {
    const pointer = apiError.source?.pointer;
    const detail = detailWithoutPointer(apiError.detail, pointer);
    // A deletion concerns a resource the file no longer has: no place in the file to point at.
    if (!base) return { code: apiError.code, detail: `${change.label}: ${detail}`, path: [], status: apiError.status };
    return {
      code: apiError.code,
      detail,
      path: pointer ? [...base, ...inEntry(change, pointerSegments(pointer))] : base,
      status: apiError.status,
      ...(pointer && { pointer }),
    };
  });
  return problemErrors(file, problems);
}

function entryPath(change: Change): FilePath | undefined {
  if (change.action === 'delete') return undefined;
  if (change.kind === 'trafficConfig') return ['trafficConfigs', change.index];
  return [change.kind === 'certificate' ? 'certificates' : 'caCertificates', change.key];
}

/** A pointer into the request's document (`/data/attributes/...`) as a path inside the file's entry. */
function inEntry(change: Change, segments: FilePath): FilePath {
  if (segments[0] !== 'data') return [];
  if (change.kind === 'trafficConfig') return segments.slice(1);
  const [, section, attribute, ...rest] = segments;
  if (section !== 'attributes' || attribute === undefined) return [];
  if (change.kind === 'certificate' && change.action === 'create' && change.entry.upload && typeof attribute === 'string') {
    const source = change.entry.upload.sourceAttribute[attribute as 'certificate' | 'intermediateCertificates' | 'privateKey'];
    return [source ?? attribute, ...(source?.endsWith('File') ? [] : rest)];
  }
  return [attribute, ...rest];
}

/** The plan and its outcome, for people. */
export function describeReport(report: ApplyReport): string {
  const { summary } = report;
  const lines = [
    `${report.file} for tenant ${report.tenantId}: ${summary.create} to create, ${summary.update} to change, ${summary.delete} to delete, ${summary.unchanged} unchanged`,
  ];
  const sign = { create: '+', update: '~', delete: '-' } as const;
  for (const change of report.changes) {
    lines.push(
      `  ${sign[change.action]} ${change.label}${change.action === 'create' && change.id && !report.dryRun ? ` -> ${change.id}` : ''}`,
    );
    for (const difference of change.attributeChanges ?? [])
      lines.push(`      ${difference.path}: ${shown(difference.from)} -> ${shown(difference.to)}`);
  }
  if (report.changes.length === 0) lines.push('nothing to change');
  else lines.push(report.dryRun ? 'dry run: nothing was changed' : 'applied');
  return lines.join('\n');
}

function shown(value: unknown): string {
  if (value === undefined) return '(absent)';
  if (isPending(value)) return `(the new ${value.pending} ${value.key})`;
  const text = JSON.stringify(value, (_key, item: unknown) => (isPending(item) ? `(the new ${item.pending} ${item.key})` : item));
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}
