/**
 * A small SVG line chart of one reading over time. No chart library: the
 * geometry comes from `linePath` in shape.ts; colours come from CSS.
 */
import * as React from 'react';

import { IChartFrame, IPoint, linePath } from './shape';

const WIDTH = 240;
const HEIGHT = 40;
/** Room above and below so that a line at 0 or at the top stays visible. */
const PAD = 2;

export interface ISparklineProps {
  points: IPoint[];
  /** Time range drawn (unix seconds). */
  t0: number;
  t1: number;
  /** Value at the top edge; the bottom edge is 0. */
  yMax: number;
  /** Gaps longer than this many seconds are drawn as gaps. */
  maxGap: number;
  /** Accessible description, e.g. "GPU 0 utilisation over 10 min". */
  label: string;
  /** Extra class for the line colour. */
  className?: string;
}

export function Sparkline(props: ISparklineProps): JSX.Element {
  const frame: IChartFrame = {
    t0: props.t0,
    t1: props.t1,
    yMin: 0,
    yMax: props.yMax > 0 ? props.yMax : 1,
    width: WIDTH,
    height: HEIGHT
  };
  const d = linePath(props.points, frame, props.maxGap);
  return (
    <svg
      className={`jp-gpu-sparkline ${props.className ?? ''}`}
      viewBox={`0 ${-PAD} ${WIDTH} ${HEIGHT + 2 * PAD}`}
      preserveAspectRatio="none"
      role="img"
      aria-label={props.label}
    >
      <title>{props.label}</title>
      <line
        className="jp-gpu-sparkline-grid"
        x1={0}
        x2={WIDTH}
        y1={HEIGHT / 2}
        y2={HEIGHT / 2}
      />
      {d && <path className="jp-gpu-sparkline-line" d={d} />}
    </svg>
  );
}
