import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  formatAge,
  formatBytes,
  formatBytesOf,
  formatCelsius,
  formatMHz,
  formatPercent,
  formatPower,
  formatRate,
  formatRatio,
  MISSING
} from '../format';

const GiB = 1024 ** 3;

describe('formatBytes', () => {
  it('uses binary units by default, three significant figures', () => {
    assert.equal(formatBytes(0), '0 B');
    assert.equal(formatBytes(512), '512 B');
    assert.equal(formatBytes(1536), '1.50 KiB');
    assert.equal(formatBytes(30.1 * GiB), '30.1 GiB');
    assert.equal(formatBytes(143771 * 1024 ** 2), '140 GiB');
  });

  it('uses powers of 1000 for decimal units', () => {
    assert.equal(formatBytes(1500, 'decimal'), '1.50 kB');
    assert.equal(formatBytes(150e9, 'decimal'), '150 GB');
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
  });
});
