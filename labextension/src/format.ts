/**
 * Number formatting for the GPU panel and status bar. Pure functions, no DOM.
 */

/** `binary`: KiB/MiB/GiB (powers of 1024, as nvidia-smi reports); `decimal`: kB/MB/GB. */
export type MemoryUnits = 'binary' | 'decimal';

const NAMES: Record<MemoryUnits, string[]> = {
  binary: ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'],
  decimal: ['B', 'kB', 'MB', 'GB', 'TB', 'PB']
};
const BASE: Record<MemoryUnits, number> = { binary: 1024, decimal: 1000 };

/** Placeholder for a reading that is missing (not yet sampled). */
export const MISSING = '—';

function isNumber(x: number | null | undefined): x is number {
  return typeof x === 'number' && isFinite(x);
}

/**
 * Three significant figures: 1.23, 12.3, 123; 0 stays "0". Decimals are chosen after rounding,
 * so 9.999 is "10.0". `toFixed` rounds halves away from zero, as the Python twin
 * (`jupyter_gpu/analysis/units.py`) does on purpose.
 */
function threeFigures(x: number): string {
  if (x === 0) {
    return '0';
  }
  for (const [digits, limit] of [
    [2, 10],
    [1, 100]
  ]) {
    const text = x.toFixed(digits);
    if (Math.abs(Number(text)) < limit) {
      return text;
    }
  }
  return x.toFixed(0);
}

/** `x` bytes as a number in the unit `divisor`: whole bytes, else three figures. */
function scaled(x: number, divisor: number): string {
  return divisor === 1 ? x.toFixed(0) : threeFigures(x / divisor);
}

/**
 * The unit that prints `bytes` as a number below 1000 ("0.98 MiB", never "1004 KiB"), in the
 * style every surface of jupyter_gpu shares; `tests/fixtures/byte_formats.json` pins it.
 */
export function byteUnit(
  bytes: number,
  units: MemoryUnits = 'binary'
): { divisor: number; unit: string } {
  const names = NAMES[units];
  const abs = Math.abs(bytes);
  let i = 0;
  while (
    i < names.length - 1 &&
    Number(scaled(abs, Math.pow(BASE[units], i))) >= 1000
  ) {
    i++;
  }
  return { divisor: Math.pow(BASE[units], i), unit: names[i] };
}

export function formatBytes(
  bytes: number | null | undefined,
  units: MemoryUnits = 'binary'
): string {
  if (!isNumber(bytes)) {
    return MISSING;
  }
  const { divisor, unit } = byteUnit(bytes, units);
  return `${bytes < 0 ? '-' : ''}${scaled(Math.abs(bytes), divisor)} ${unit}`;
}

/**
 * A change in memory, always signed: `+1.50 GiB`, `-512 MiB`, `+0 B`.
 */
export function formatBytesChange(bytes: number | null | undefined): string {
  if (!isNumber(bytes)) {
    return MISSING;
  }
  return `${bytes >= 0 ? '+' : ''}${formatBytes(bytes)}`;
}

/**
 * "used / total" in the unit of the total, e.g. `30.1 / 140 GiB`.
 */
export function formatBytesOf(
  used: number | null | undefined,
  total: number | null | undefined,
  units: MemoryUnits = 'binary'
): string {
  if (!isNumber(total)) {
    return formatBytes(used, units);
  }
  const { divisor, unit } = byteUnit(total, units);
  const of = `${scaled(total, divisor)} ${unit}`;
  if (isNumber(used) && used > 0 && used < divisor / 100) {
    // too small to show in the total's unit ("0.00 / 140 GiB"): give its own
    return `${formatBytes(used, units)} / ${of}`;
  }
  return `${isNumber(used) ? scaled(used, divisor) : MISSING} / ${of}`;
}

export function formatRate(
  bytesPerSecond: number | null | undefined,
  units: MemoryUnits = 'binary'
): string {
  const s = formatBytes(bytesPerSecond, units);
  return s === MISSING ? s : `${s}/s`;
}

/**
 * A percentage, to `digits` decimals; `'fine'` gives one decimal below 10%
 * (but none for 0), where the difference between 0.3% and 3% is the story
 * (SM active of a launch-bound loop).
 */
export function formatPercent(
  percent: number | null | undefined,
  digits: number | 'fine' = 0
): string {
  if (!isNumber(percent)) {
    return MISSING;
  }
  const places =
    digits === 'fine'
      ? percent !== 0 && Math.abs(percent) < 10
        ? 1
        : 0
      : digits;
  return `${percent.toFixed(places)}%`;
}

/** A 0..1 ratio as a percentage. */
export function formatRatio(ratio: number | null | undefined): string {
  return isNumber(ratio) ? formatPercent(ratio * 100, 'fine') : MISSING;
}

export function formatCelsius(c: number | null | undefined): string {
  return isNumber(c) ? `${c.toFixed(0)} °C` : MISSING;
}

export function formatWatts(w: number | null | undefined): string {
  return isNumber(w) ? `${w.toFixed(w < 10 ? 1 : 0)} W` : MISSING;
}

/** Power against its limit, e.g. `312 / 700 W`. */
export function formatPower(
  w: number | null | undefined,
  limit: number | null | undefined
): string {
  if (!isNumber(limit)) {
    return formatWatts(w);
  }
  const p = isNumber(w) ? w.toFixed(0) : MISSING;
  return `${p} / ${limit.toFixed(0)} W`;
}

export function formatMHz(mhz: number | null | undefined): string {
  if (!isNumber(mhz)) {
    return MISSING;
  }
  return mhz >= 1000
    ? `${(mhz / 1000).toFixed(2)} GHz`
    : `${mhz.toFixed(0)} MHz`;
}

/** Duration in seconds as `45 s`, `3 min`, `2 h`. */
export function formatAge(seconds: number | null | undefined): string {
  if (!isNumber(seconds)) {
    return MISSING;
  }
  if (seconds < 90) {
    return `${Math.max(0, Math.round(seconds))} s`;
  }
  if (seconds < 90 * 60) {
    return `${Math.round(seconds / 60)} min`;
  }
  return `${Math.round(seconds / 3600)} h`;
}

/**
 * Time left before something happens, to the second under an hour: `45 s`, `1 min 0 s`,
 * `2 h 5 min` (format_countdown of jupyter_gpu/analysis/units.py). formatAge's `1 min` would
 * read as anything from 30 s to 90 s to someone about to lose her server.
 */
export function formatCountdown(seconds: number): string {
  const total = isNumber(seconds) ? Math.max(0, Math.round(seconds)) : 0;
  if (total < 60) {
    return `${total} s`;
  }
  if (total < 3600) {
    return `${Math.floor(total / 60)} min ${total % 60} s`;
  }
  return `${Math.floor(total / 3600)} h ${Math.floor((total % 3600) / 60)} min`;
}

/** One piece of a sentence from the server: plain text, or a `backticked` command or name. */
export interface IProsePart {
  text: string;
  code: boolean;
}

/** Split a server sentence at its backticks, so commands show as code, not as "`pip …`". */
export function proseParts(text: string): IProsePart[] {
  return text
    .split('`')
    .map((part, i) => ({ text: part, code: i % 2 === 1 }))
    .filter(part => part.text !== '');
}
