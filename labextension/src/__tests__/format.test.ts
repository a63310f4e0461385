import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import {
  formatAge,
  formatBytes,
  formatBytesChange,
  formatBytesOf,
  formatCelsius,
  formatCountdown,
  formatMHz,
  formatPercent,
  formatPower,
  formatRate,
  formatRatio,
  MISSING,
  proseParts
} from '../format';

const GiB = 1024 ** 3;

/** The table the Python formatter (jupyter_gpu/analysis/units.py) is tested against too. */
const TABLE: {
  bytes: [number, string][];
  bytes_of: [number, number | null, string][];
  changes: [number, string][];
  durations: [number, string][];
  countdowns: [number, string][];
} = JSON.parse(
  readFileSync(
    // compiled to lib-test/__tests__/, three levels below the repository root
    join(__dirname, '..', '..', '..', 'tests', 'fixtures', 'byte_formats.json'),
    'utf-8'
  )
);

describe('formatBytes', () => {
  it('prints the shared table exactly as the Python side does', () => {
    for (const [bytes, text] of TABLE.bytes) {
      assert.equal(formatBytes(bytes), text, `${bytes} bytes`);
    }
    for (const [used, total, text] of TABLE.bytes_of) {
      assert.equal(formatBytesOf(used, total), text, `${used} of ${total}`);
    }
    for (const [bytes, text] of TABLE.changes) {
      assert.equal(
        formatBytesChange(bytes),
        text,
        `a change of ${bytes} bytes`
      );
    }
  });

  it('keeps the number below 1000 and rounds before choosing decimals', () => {
    assert.equal(formatBytes(1021 * 1024), '1.00 MiB');
    assert.equal(formatRate(1021 * 1024), '1.00 MiB/s');
    assert.equal(formatBytes(9.999 * GiB), '10.0 GiB');
  });

  it('uses powers of 1000 for decimal units', () => {
    assert.equal(formatBytes(1500, 'decimal'), '1.50 kB');
    assert.equal(formatBytes(150e9, 'decimal'), '150 GB');
    assert.equal(formatBytes(999.6e6, 'decimal'), '1.00 GB');
  });

  it('shows missing readings as a dash', () => {
    assert.equal(formatBytes(null), MISSING);
    assert.equal(formatBytes(undefined), MISSING);
    assert.equal(formatBytes(NaN), MISSING);
  });
});

describe('formatBytesOf', () => {
  it('uses the unit of the total for both numbers', () => {
    assert.equal(formatBytesOf(512 * 1024 ** 2, 140 * GiB), '0.50 / 140 GiB');
    assert.equal(formatBytesOf(null, 140 * GiB), `${MISSING} / 140 GiB`);
    assert.equal(formatBytesOf(2 * GiB, null), '2.00 GiB');
    assert.equal(formatBytesOf(3407872, 140 * GiB), '3.25 MiB / 140 GiB');
    assert.equal(formatBytesOf(0, 140 * GiB), '0 / 140 GiB');
  });
});

describe('other readings', () => {
  it('formats percent, ratio, temperature, power, clocks, rates, ages', () => {
    assert.equal(formatPercent(45.4), '45%');
    assert.equal(formatPercent(null), MISSING);
    assert.equal(formatRatio(0.25), '25%');
    assert.equal(formatRatio(0.042), '4.2%');
    // 'fine': the tenths where they matter (SM active of a launch-bound loop), none for 0
    assert.equal(formatPercent(0.33, 'fine'), '0.3%');
    assert.equal(formatPercent(9.96, 'fine'), '10.0%');
    assert.equal(formatPercent(96.6, 'fine'), '97%');
    assert.equal(formatPercent(0, 'fine'), '0%');
    assert.equal(formatCelsius(36.6), '37 °C');
    assert.equal(formatPower(312.4, 700), '312 / 700 W');
    assert.equal(formatPower(null, 700), `${MISSING} / 700 W`);
    assert.equal(formatPower(75.2, null), '75 W');
    assert.equal(formatMHz(1980), '1.98 GHz');
    assert.equal(formatMHz(345), '345 MHz');
    assert.equal(formatRate(2 * 1024 ** 2), '2.00 MiB/s');
    assert.equal(formatRate(null), MISSING);
    assert.equal(formatAge(12.4), '12 s');
    assert.equal(formatAge(600), '10 min');
    assert.equal(formatAge(7200), '2 h');
    for (const [seconds, text] of TABLE.durations) {
      assert.equal(formatAge(seconds), text, `${seconds} s`);
    }
  });
});

describe('server sentences', () => {
  it('shows backticked commands as code, not with their backticks', () => {
    assert.deepEqual(proseParts('run `pip install x` then `y`.'), [
      { text: 'run ', code: false },
      { text: 'pip install x', code: true },
      { text: ' then ', code: false },
      { text: 'y', code: true },
      { text: '.', code: false }
    ]);
    assert.deepEqual(proseParts('no code here'), [
      { text: 'no code here', code: false }
    ]);
  });
});

describe('formatCountdown', () => {
  it('prints the shared table exactly as the Python side does', () => {
    for (const [seconds, text] of TABLE.countdowns) {
      assert.equal(formatCountdown(seconds), text, `${seconds} s`);
    }
  });
});
