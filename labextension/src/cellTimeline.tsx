/**
 * One notebook's per-cell GPU timeline, opened from its row in the panel: its
 * kernel's allocated memory over time with each cell's start marked (uPlot),
 * and the cells that left the most memory and peaked highest. Clicking a cell
 * scrolls the notebook to it.
 */
import * as React from 'react';

import { BYTE_STEPS, PALETTE, TimeChart } from './chart';
import { formatBytes, formatBytesChange, MemoryUnits } from './format';
import {
  cellLabel,
  cellPeak,
  ITimelineData,
  rankedCells,
  timelineData
} from './timeline';
import type { Cell, CellsReply } from './types';

const HEIGHT = 140;
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

function TimelineChart(props: {
  data: ITimelineData;
  units: MemoryUnits;
}): JSX.Element {
  const { data, units } = props;
  const times = data.columns[0];
  const range: [number, number] = [
    times[0] ?? 0,
    Math.max(times[times.length - 1] ?? 1, (times[0] ?? 0) + 1)
  ];
  return (
    <TimeChart
      className="jp-gpu-timeline-chart"
      columns={data.columns}
      series={data.gpus.map((gpu, i) => ({
        label: `cuda:${gpu} allocated`,
        colour: PALETTE[i % PALETTE.length]
      }))}
      format={v => formatBytes(v, units)}
      incrs={BYTE_STEPS}
      range={range}
      yMax={null}
      height={HEIGHT}
      label="This kernel's allocated GPU memory over time, each cell's start marked"
      markers={data.boundaries}
    />
  );
}
