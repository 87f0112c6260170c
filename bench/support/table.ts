/** Medians and the plain-text result tables the benchmarks print. */

export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** `value.toFixed(digits)`, or '-' for a value that is not a finite number. */
export function fixed(value: number | undefined, digits: number): string {
  return value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(digits);
}

/** A ratio as "1.23x", or '-'. */
export function ratio(value: number, base: number): string {
  const r = value / base;
  return Number.isFinite(r) ? `${r.toFixed(2)}x` : '-';
}

export interface Column {
  title: string;
  /** Default: the first column left, the others right. */
  align?: 'left' | 'right';
}

/** Formats rows under their titles, each column as wide as its widest cell, 3 spaces between columns. */
export function formatTable(columns: readonly (Column | string)[], rows: readonly (readonly string[])[]): string {
  const cols = columns
    .map((c) => (typeof c === 'string' ? { title: c } : c))
    .map((c, i) => ({ ...c, align: c.align ?? (i === 0 ? 'left' : 'right') }));
  const widths = cols.map((c, i) => Math.max(c.title.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cols
      .map((c, i) => {
        const cell = cells[i] ?? '';
        return c.align === 'left' ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!);
      })
      .join('   ')
      .trimEnd();
  return [line(cols.map((c) => c.title)), ...rows.map(line)].join('\n');
}

/** Prints formatTable(...). */
export function printTable(columns: readonly (Column | string)[], rows: readonly (readonly string[])[]): void {
  console.log(formatTable(columns, rows));
}
