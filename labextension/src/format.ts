/**
 * Number formatting for the GPU panel and status bar. Pure functions, no DOM.
 */

/** `binary`: KiB/MiB/GiB (powers of 1024, as nvidia-smi reports); `decimal`: kB/MB/GB. */
export type MemoryUnits = 'binary' | 'decimal';

const BINARY = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
const DECIMAL = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];

/** Placeholder for a reading that is missing (not yet sampled). */
export const MISSING = '—';

function isNumber(x: number | null | undefined): x is number {
  return typeof x === 'number' && isFinite(x);
}

/** Significant-figure rounding that keeps 3 figures: 1.23, 12.3, 123. */
function threeFigures(x: number): string {
  if (x === 0) {
    return '0';
  }
  const abs = Math.abs(x);
  if (abs >= 100) {
    return x.toFixed(0);
  }
  if (abs >= 10) {
    return x.toFixed(1);
  }
  return x.toFixed(2);
}

/** Pick the unit for `bytes` so that the number is below 1000 (or 1024). */
export function byteUnit(
  bytes: number,
  units: MemoryUnits = 'binary'
): { divisor: number; unit: string } {
  const base = units === 'binary' ? 1024 : 1000;
  const names = units === 'binary' ? BINARY : DECIMAL;
  let i = 0;
  let abs = Math.abs(bytes);
  while (abs >= base && i < names.length - 1) {
    abs /= base;
    i++;
  }
  return { divisor: Math.pow(base, i), unit: names[i] };
}

export function formatBytes(
  bytes: number | null | undefined,
  units: MemoryUnits = 'binary'
): string {
  if (!isNumber(bytes)) {
    return MISSING;
  }
  const { divisor, unit } = byteUnit(bytes, units);
  if (divisor === 1) {
    return `${bytes.toFixed(0)} ${unit}`;
  }
  return `${threeFigures(bytes / divisor)} ${unit}`;
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
  const t = divisor === 1 ? total.toFixed(0) : threeFigures(total / divisor);
  if (isNumber(used) && used > 0 && used < divisor / 100) {
    // too small to show in the total's unit ("0.00 / 140 GiB"): give its own
    return `${formatBytes(used, units)} / ${t} ${unit}`;
  }
  const u = isNumber(used)
    ? divisor === 1
      ? used.toFixed(0)
      : threeFigures(used / divisor)
    : MISSING;
  return `${u} / ${t} ${unit}`;
}

export function formatRate(
  bytesPerSecond: number | null | undefined,
  units: MemoryUnits = 'binary'
): string {
  const s = formatBytes(bytesPerSecond, units);
  return s === MISSING ? s : `${s}/s`;
}

export function formatPercent(
  percent: number | null | undefined,
  digits = 0
): string {
  return isNumber(percent) ? `${percent.toFixed(digits)}%` : MISSING;
}

/** A 0..1 ratio as a percentage. */
export function formatRatio(ratio: number | null | undefined): string {
  return isNumber(ratio) ? formatPercent(ratio * 100, ratio < 0.1 ? 1 : 0) : MISSING;
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
  return mhz >= 1000 ? `${(mhz / 1000).toFixed(2)} GHz` : `${mhz.toFixed(0)} MHz`;
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
