/**
 * The charts of one GPU, as the panel's cards and the dashboard draw them:
 * utilisation, memory stacked by holder, power against its limit,
 * temperature, SM clock, PCIe. Each is the one TimeChart over columns shaped
 * by series.ts, with the one formatter (format.ts) for axes and hover values.
 */
import * as React from 'react';

import { BYTE_STEPS, GREY, PALETTE, TimeChart } from './chart';
import {
  formatBytes,
  formatCelsius,
  formatMHz,
  formatPercent,
  formatRate,
  formatWatts,
  MemoryUnits
} from './format';
import {
  fieldColumns,
  IMemoryStack,
  memoryLayers,
  memoryStack
} from './series';
import { deviceLabel, IGpuRef } from './shape';
import { cellMarkers, INotebookCells } from './timeline';
import type { Cell, ProcessOwner, Sample } from './types';

export interface IGpuChartProps {
  history: Sample[];
  gpu: IGpuRef;
  /** Time range drawn (unix seconds). */
  range: [number, number];
  /** Samples further apart than this are drawn with a gap between them. */
  maxGap: number;
  units: MemoryUnits;
  height: number;
  /** "over 10 min", for the accessible label. */
  span: string;
}

export function UtilisationChart(
  props: IGpuChartProps & { withMemoryBusy?: boolean }
): JSX.Element {
  const fields = props.withMemoryBusy
    ? (['utilization_gpu_percent', 'utilization_memory_percent'] as const)
    : (['utilization_gpu_percent'] as const);
  const columns = () =>
    fieldColumns(props.history, props.gpu, [...fields], props.maxGap);
  return (
    <TimeChart
      className="jp-gpu-chart-utilisation"
      columns={columns}
      series={[
        { label: 'GPU busy', colour: PALETTE[0] },
        ...(props.withMemoryBusy
          ? [{ label: 'memory busy', colour: PALETTE[1] }]
          : [])
      ]}
      format={v => formatPercent(v)}
      range={props.range}
      yMax={100}
      height={props.height}
      label={`${deviceLabel(props.gpu)} utilisation ${props.span}`}
    />
  );
}

export function MemoryChart(
  props: IGpuChartProps & {
    owners: ProcessOwner[];
    total: number | null;
    /** A notebook kernel's cells, to mark their starts (the dashboard's). */
    cellsOf?: (kernelId: string) => Cell[] | null;
  }
): JSX.Element {
  const layers = React.useMemo(
    () => memoryLayers(props.history, props.gpu, props.owners),
    [props.history, props.gpu.uuid, props.owners]
  );
  // the stack is shaped once the chart draws: charts out of view skip it
  const stack = React.useMemo(() => {
    let shaped: IMemoryStack | null = null;
    return () =>
      (shaped ??= memoryStack(
        props.history,
        props.gpu,
        props.owners,
        props.maxGap,
        layers
      ));
  }, [layers, props.maxGap]);
  const columns = React.useCallback(() => stack().stacked, [stack]);
  const own = React.useCallback(() => stack().raw, [stack]);
  let notebook = 0;
  const series = layers.map(layer => ({
    label: layer.label,
    colour:
      layer.kind === 'notebook' || layer.kind === 'mig'
        ? PALETTE[notebook++ % PALETTE.length]
        : layer.kind === 'processes'
          ? GREY
          : '#BBBBBB',
    fill: true
  }));
  const cellsOf = props.cellsOf;
  const notebooks: INotebookCells[] = [];
  layers.forEach((layer, i) => {
    if (cellsOf && layer.kernelId !== null) {
      const cells = cellsOf(layer.kernelId) ?? [];
      notebooks.push({ path: layer.label, colour: series[i].colour, cells });
    }
  });
  const markers = cellsOf && cellMarkers(notebooks, props.range);
  return (
    <TimeChart
      className="jp-gpu-chart-memory"
      columns={columns}
      own={own}
      series={series}
      format={v => formatBytes(v, props.units)}
      incrs={props.units === 'binary' ? BYTE_STEPS : undefined}
      range={props.range}
      yMax={props.total}
      height={props.height}
      label={`${deviceLabel(props.gpu)} memory by holder ${props.span}`}
      markers={markers}
    />
  );
}

export function PowerChart(props: IGpuChartProps): JSX.Element {
  const columns = () =>
    fieldColumns(
      props.history,
      props.gpu,
      ['power_watts', 'power_limit_watts'],
      props.maxGap
    );
  return (
    <TimeChart
      className="jp-gpu-chart-power"
      columns={columns}
      series={[
        { label: 'power', colour: PALETTE[5] },
        { label: 'limit', colour: GREY, dash: [4, 3] }
      ]}
      format={v => formatWatts(v)}
      range={props.range}
      yMax={null}
      height={props.height}
      label={`${deviceLabel(props.gpu)} power against its limit ${props.span}`}
    />
  );
}

export function TemperatureChart(props: IGpuChartProps): JSX.Element {
  const columns = () =>
    fieldColumns(
      props.history,
      props.gpu,
      ['temperature_celsius', 'memory_temperature_celsius'],
      props.maxGap
    );
  return (
    <TimeChart
      className="jp-gpu-chart-temperature"
      columns={columns}
      series={[
        { label: 'GPU', colour: PALETTE[5] },
        { label: 'memory (HBM)', colour: PALETTE[3] }
      ]}
      format={v => formatCelsius(v)}
      range={props.range}
      yMax={null}
      height={props.height}
      label={`${deviceLabel(props.gpu)} temperature ${props.span}`}
    />
  );
}

export function ClockChart(props: IGpuChartProps): JSX.Element {
  const columns = () =>
    fieldColumns(props.history, props.gpu, ['clock_sm_mhz'], props.maxGap);
  return (
    <TimeChart
      className="jp-gpu-chart-clock"
      columns={columns}
      series={[{ label: 'SM clock', colour: PALETTE[2] }]}
      format={v => formatMHz(v)}
      range={props.range}
      yMax={null}
      height={props.height}
      label={`${deviceLabel(props.gpu)} SM clock ${props.span}`}
    />
  );
}

export function PcieChart(props: IGpuChartProps): JSX.Element {
  const columns = () =>
    fieldColumns(
      props.history,
      props.gpu,
      ['pcie_rx_bytes_per_second', 'pcie_tx_bytes_per_second'],
      props.maxGap
    );
  return (
    <TimeChart
      className="jp-gpu-chart-pcie"
      columns={columns}
      series={[
        { label: 'rx', colour: PALETTE[4] },
        { label: 'tx', colour: PALETTE[1] }
      ]}
      format={v => formatRate(v, props.units)}
      incrs={props.units === 'binary' ? BYTE_STEPS : undefined}
      range={props.range}
      yMax={null}
      height={props.height}
      label={`${deviceLabel(props.gpu)} PCIe throughput ${props.span}`}
    />
  );
}
