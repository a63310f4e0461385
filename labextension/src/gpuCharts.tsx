/**
 * The charts of one GPU, as the panel's cards and the dashboard draw them:
 * utilisation, SM and tensor-core activity, memory stacked by holder, power
 * against its limit, temperature, SM clock, PCIe, NVLink. Each is the one TimeChart over columns shaped
 * by series.ts, with the one formatter (format.ts) for axes and hover values.
 */
import * as React from 'react';

import { MEANING } from './activity';
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
        { label: 'GPU busy', colour: PALETTE[0], meaning: MEANING.utilisation },
        ...(props.withMemoryBusy
          ? [
              {
                label: 'memory busy',
                colour: PALETTE[1],
                meaning: MEANING.memoryBusy
              }
            ]
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

/**
 * What the GPU really did, from GPU performance monitoring: the share of SMs
 * busy and of time the tensor cores ran, where utilisation counts any kernel.
 */
export function ActivityChart(props: IGpuChartProps): JSX.Element {
  const columns = () =>
    fieldColumns(
      props.history,
      props.gpu,
      ['sm_active_percent', 'tensor_active_percent'],
      props.maxGap
    );
  return (
    <TimeChart
      className="jp-gpu-chart-activity"
      columns={columns}
      series={[
        { label: 'SM active', colour: PALETTE[2], meaning: MEANING.smActive },
        {
          label: 'tensor active',
          colour: PALETTE[3],
          meaning: MEANING.tensorActive
        }
      ]}
      format={v => formatPercent(v, 'fine')}
      range={props.range}
      yMax={100}
      height={props.height}
      label={`${deviceLabel(props.gpu)} SM and tensor-core activity ${props.span}`}
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

/** The links a GPU moves data over, each charted as rx and tx. */
const LINKS = {
  pcie: {
    name: 'PCIe',
    fields: ['pcie_rx_bytes_per_second', 'pcie_tx_bytes_per_second'],
    meaning: MEANING.pcie
  },
  nvlink: {
    name: 'NVLink',
    fields: ['nvlink_rx_bytes_per_second', 'nvlink_tx_bytes_per_second'],
    meaning: MEANING.nvlink
  }
} as const;

/** Throughput over one of a GPU's links (PCIe, NVLink): received and sent. */
export function LinkChart(
  props: IGpuChartProps & { link: keyof typeof LINKS }
): JSX.Element {
  const link = LINKS[props.link];
  const columns = () =>
    fieldColumns(props.history, props.gpu, [...link.fields], props.maxGap);
  return (
    <TimeChart
      className={`jp-gpu-chart-${props.link}`}
      columns={columns}
      series={[
        { label: 'rx', colour: PALETTE[4], meaning: link.meaning },
        { label: 'tx', colour: PALETTE[1], meaning: link.meaning }
      ]}
      format={v => formatRate(v, props.units)}
      incrs={props.units === 'binary' ? BYTE_STEPS : undefined}
      range={props.range}
      yMax={null}
      height={props.height}
      label={`${deviceLabel(props.gpu)} ${link.name} throughput ${props.span}`}
    />
  );
}
