/**
 * One notebook's per-cell GPU timeline, opened from its row in the panel: its
 * kernel's allocated memory over time with each cell's start marked (uPlot),
 * and the cells that left the most memory and peaked highest. Clicking a cell
 * scrolls the notebook to it.
 */
import * as React from 'react';
import uPlot from 'uplot';

import { formatBytes, formatBytesChange, MemoryUnits } from './format';
import {
  cellLabel,
  cellPeak,
  ITimelineData,
  rankedCells,
  timelineData
} from './timeline';
import type { Cell, CellsReply } from './types';

/** Okabe and Ito's palette: told apart with every common colour blindness. */
const PALETTE = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9'];
const HEIGHT = 140;
const BYTE_STEPS = Array.from({ length: 44 }, (_, i) => 2 ** (6 + i));
const REFRESH_MS = 5000;

export interface ICellTimelineProps {
  kernelId: string;
  path: string | null;
  units: MemoryUnits;
  load: (kernelId: string) => Promise<CellsReply>;
  reveal: (path: string, cell: Cell) => void;
}

export function CellTimeline(props: ICellTimelineProps): JSX.Element {
  const [reply, setReply] = React.useState<CellsReply | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const { kernelId, load } = props;

  React.useEffect(() => {
    let live = true;
    const fetch = () =>
      load(kernelId).then(
        r => live && (setReply(r), setError(null)),
        (e: Error) => live && setError(e.message)
      );
    void fetch();
    const timer = window.setInterval(fetch, REFRESH_MS);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, [kernelId, load]);

  if (error) {
    return <div className="jp-gpu-error">{error}</div>;
  }
  if (reply === null) {
    return <div className="jp-gpu-loading">Loading the cells…</div>;
  }
  const onGpu = reply.cells.filter(c => c.gpus.length > 0);
  const reveal = (cell: Cell) => props.path && props.reveal(props.path, cell);
  return (
    <div className="jp-gpu-timeline" data-field="timeline">
      <div className="jp-gpu-hint">
        {reply.cells.length} cells run, {onGpu.length} with CUDA in use
        {reply.reason ? ` · ${reply.reason}` : ''}
      </div>
      {onGpu.length > 0 && (
        <TimelineChart data={timelineData(reply.cells)} units={props.units} />
      )}
      <CellList
        title="Left the most allocated"
        field="most-left"
        rows={rankedCells(reply, reply.most_left).map(({ cell, bytes }) => ({
          cell,
          value: formatBytesChange(bytes),
          note: peakNote(cell, props.units)
        }))}
        empty="No cell left memory allocated."
        reveal={reveal}
      />
      <CellList
        title="Highest peaks"
        field="highest-peaks"
        rows={rankedCells(reply, reply.highest_peaks).map(
          ({ cell, bytes }) => ({
            cell,
            value: formatBytes(bytes, props.units),
            note: `${cell.wall_seconds.toFixed(1)} s, ${cell.outcome}`
          })
        )}
        empty="No cell raised the allocator's peak."
        reveal={reveal}
      />
    </div>
  );
}

function peakNote(cell: Cell, units: MemoryUnits): string {
  const peak = cellPeak(cell);
  const time = `${cell.wall_seconds.toFixed(1)} s, ${cell.outcome}`;
  return peak === null ? time : `peak ${formatBytes(peak, units)}, ${time}`;
}

function CellList(props: {
  title: string;
  field: string;
  rows: { cell: Cell; value: string; note: string }[];
  empty: string;
  reveal: (cell: Cell) => void;
}): JSX.Element {
  return (
    <div className="jp-gpu-cells" data-field={props.field}>
      <div className="jp-gpu-cells-title">{props.title}</div>
      {props.rows.length === 0 ? (
        <div className="jp-gpu-hint">{props.empty}</div>
      ) : (
        <ol className="jp-gpu-cells-list">
          {props.rows.map(({ cell, value, note }) => (
            <li key={`${cell.pid}-${cell.seq}`}>
              <button
                className="jp-gpu-link"
                data-cell-id={cell.cell_id ?? undefined}
                title="Show this cell in the notebook"
                onClick={() => props.reveal(cell)}
              >
                cell {cellLabel(cell)}
              </button>{' '}
              <span className="jp-gpu-value">{value}</span>{' '}
              <span className="jp-gpu-hint">{note}</span>
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}

/** The theme's value of a CSS variable, for the canvas (which cannot read CSS). */
function themeColour(name: string, fallback: string): string {
  return (
    getComputedStyle(document.body).getPropertyValue(name).trim() || fallback
  );
}

function chartOptions(
  data: ITimelineData,
  boundaries: () => ITimelineData['boundaries'],
  width: number,
  units: MemoryUnits
): uPlot.Options {
  const text = themeColour('--jp-ui-font-color1', '#000');
  const grid = themeColour('--jp-border-color2', '#ddd');
  const axis = {
    stroke: text,
    grid: { stroke: grid, width: 1 },
    ticks: { stroke: grid, width: 1 }
  };
  const drawBoundaries = (u: uPlot) => {
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = themeColour('--jp-ui-font-color3', '#999');
    ctx.fillStyle = text;
    ctx.setLineDash([2, 3]);
    ctx.font = `${10 * uPlot.pxRatio}px sans-serif`;
    let labelledUpTo = -Infinity; // labels that would overlap are left out, not the lines
    for (const b of boundaries()) {
      const x = Math.round(u.valToPos(b.t, 'x', true));
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      if (x > labelledUpTo) {
        ctx.fillText(b.label, x + 2, u.bbox.top + 10 * uPlot.pxRatio);
        labelledUpTo = x + ctx.measureText(b.label).width + 4;
      }
    }
    ctx.restore();
  };
  return {
    width,
    height: HEIGHT,
    scales: {
      x: { time: true },
      y: { range: (_u, _min, max) => [0, max || 1] }
    },
    axes: [
      axis,
      {
        ...axis,
        size: 70,
        // ticks at round binary sizes (1, 2, 4 ... GiB), as the figures are printed
        incrs: BYTE_STEPS,
        values: (_u, splits) => splits.map(v => formatBytes(v, units))
      }
    ],
    series: [
      {},
      ...data.gpus.map((gpu, i) => ({
        label: `cuda:${gpu} allocated`,
        stroke: PALETTE[i % PALETTE.length],
        width: 1.5,
        spanGaps: false,
        value: (_u: uPlot, v: number | null) => formatBytes(v, units)
      }))
    ],
    hooks: { draw: [drawBoundaries] }
  };
}

function TimelineChart(props: {
  data: ITimelineData;
  units: MemoryUnits;
}): JSX.Element {
  const box = React.useRef<HTMLDivElement>(null);
  const plot = React.useRef<uPlot | null>(null);
  const { data, units } = props;
  const boundaries = React.useRef(data.boundaries);
  boundaries.current = data.boundaries;
  const shape = `${data.gpus.join(',')}|${units}`;

  React.useEffect(() => {
    const node = box.current;
    if (!node) {
      return;
    }
    const width = () => Math.max(160, node.clientWidth);
    const chart = new uPlot(
      chartOptions(data, () => boundaries.current, width(), units),
      data.columns,
      node
    );
    plot.current = chart;
    const resize = new ResizeObserver(() =>
      chart.setSize({ width: width(), height: HEIGHT })
    );
    resize.observe(node);
    return () => {
      resize.disconnect();
      chart.destroy();
      plot.current = null;
    };
    // rebuilt only when the GPUs or units change; new data goes through setData
  }, [shape]);

  React.useEffect(() => {
    plot.current?.setData(data.columns);
  }, [data]);

  return (
    <div
      ref={box}
      className="jp-gpu-timeline-chart"
      role="img"
      aria-label="This kernel's allocated GPU memory over time, each cell's start marked"
    />
  );
}
