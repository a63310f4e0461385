/**
 * The one time-series chart of jupyter_gpu (uPlot, canvas): the panel's
 * cards, the dashboard and the per-cell timeline all draw with it. A time
 * axis, a value axis whose ticks carry units, a crosshair whose legend shows
 * each value and the time, the theme's colours (redrawn when the theme
 * changes), Okabe and Ito's colour-blind-safe palette, a fixed size so
 * nothing jumps as data arrives, and marked times (cells' starts) whose hover
 * names them. Data shaping lives in series.ts.
 */
import * as React from 'react';
import uPlot from 'uplot';

import type { Columns, IChartMarker } from './series';

/** Okabe and Ito's palette: told apart with every common colour blindness. */
export const PALETTE = [
  '#0072B2',
  '#E69F00',
  '#009E73',
  '#CC79A7',
  '#56B4E9',
  '#D55E00',
  '#F0E442'
];
/** Neutral grey for "other" layers (other processes, driver). */
export const GREY = '#999999';

/** Round binary sizes (1, 2, 4 ... GiB) as axis steps, as the figures are printed. */
export const BYTE_STEPS = Array.from({ length: 44 }, (_, i) => 2 ** (6 + i));

export interface IChartSeries {
  label: string;
  colour: string;
  /** Fill down to the series below (stacked) or to zero (the first). */
  fill?: boolean;
  dash?: number[];
  /** What the series means, in a sentence: its legend row's hover. */
  meaning?: string;
}

export interface ITimeChartProps {
  /**
   * The data, or a function that shapes it: called only while the chart is on
   * screen, so that charts scrolled out of view cost nothing per poll.
   */
  columns: Columns | (() => Columns);
  series: IChartSeries[];
  /** A value as the axis and the legend print it, with its unit. */
  format: (v: number) => string;
  /** Time range drawn (unix seconds). */
  range: [number, number];
  /** The value axis' top: a fixed maximum (100 %, a GPU's memory), or null for the data's. */
  yMax: number | null;
  height: number;
  /** Accessible description, e.g. "GPU 0 utilisation over 10 min". */
  label: string;
  /**
   * Stacked layers: the legend shows each layer's own value, not its running
   * sum; a function, like `columns`, is asked only once the chart is drawn.
   */
  own?: (number | null)[][] | (() => (number | null)[][]);
  /** Axis steps, e.g. BYTE_STEPS. */
  incrs?: number[];
  /** Times marked over the plot (cells' starts), each with a hover title. */
  markers?: IChartMarker[];
  className?: string;
}

/** The theme's value of a CSS variable, for the canvas (which cannot read CSS). */
function themeColour(name: string, fallback: string): string {
  return (
    getComputedStyle(document.body).getPropertyValue(name).trim() || fallback
  );
}

/** The name of the current theme; changes re-create the charts with its colours. */
function useTheme(): string {
  const read = () =>
    `${document.body.dataset.jpThemeName ?? ''}|${document.body.dataset.jpThemeLight ?? ''}`;
  const [theme, setTheme] = React.useState(read);
  React.useEffect(() => {
    const observer = new MutationObserver(() => setTheme(read()));
    observer.observe(document.body, {
      attributes: true,
      attributeFilter: ['data-jp-theme-name', 'data-jp-theme-light']
    });
    return () => observer.disconnect();
  }, []);
  return theme;
}

function withAlpha(hex: string, alpha: number): string {
  const a = Math.round(alpha * 255)
    .toString(16)
    .padStart(2, '0');
  return `${hex}${a}`;
}

/**
 * One formatter for every time label (toLocaleTimeString builds one per
 * call); h23, where hour12: false gave "24:05" after midnight.
 */
const CLOCK = new Intl.DateTimeFormat([], {
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hourCycle: 'h23'
});
const TIME = (t: number) => CLOCK.format(t * 1000);

/** Pixels either side of a marker's line within which the pointer shows its title. */
const MARKER_HOVER_PX = 4;
/** Titles a tip lists at most: cells run in quick succession share a pixel. */
const MARKER_TIPS = 5;

/** The markers as dashed lines, labelled where a label does not overlap the one before. */
function drawMarkers(u: uPlot, markers: IChartMarker[]): void {
  if (markers.length === 0) {
    return; // most charts: no theme lookups at their redraws
  }
  const ctx = u.ctx;
  ctx.save();
  const line = themeColour('--jp-ui-font-color3', '#999');
  const text = themeColour('--jp-ui-font-color1', '#000');
  ctx.strokeStyle = line;
  ctx.setLineDash([2, 3]);
  ctx.font = `${10 * uPlot.pxRatio}px sans-serif`;
  let labelledUpTo = -Infinity; // labels that would overlap are left out, not the lines
  for (const m of markers) {
    const x = Math.round(u.valToPos(m.t, 'x', true));
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    if (x > labelledUpTo) {
      ctx.fillStyle = m.colour ?? text;
      ctx.fillText(m.label, x + 2, u.bbox.top + 10 * uPlot.pxRatio);
      labelledUpTo = x + ctx.measureText(m.label).width + 4;
    }
  }
  ctx.restore();
}

/**
 * A uPlot plugin for the markers: drawn at each redraw from the latest props
 * (new markers need no new chart), counted on the chart's box
 * (`data-markers`), and while the pointer is on a line a tip over the plot
 * gives the titles of the markers there.
 */
function markersPlugin(
  live: React.MutableRefObject<ITimeChartProps>,
  box: HTMLElement
): uPlot.Plugin {
  const tip = document.createElement('div');
  tip.className = 'jp-gpu-marker-tip';
  tip.hidden = true;
  const hover = (u: uPlot) => {
    const left = u.cursor.left ?? -1;
    const near =
      left < 0
        ? []
        : (live.current.markers ?? []).filter(
            m => Math.abs(u.valToPos(m.t, 'x') - left) <= MARKER_HOVER_PX
          );
    tip.hidden = near.length === 0;
    if (near.length === 0) {
      return;
    }
    const titles = near.slice(0, MARKER_TIPS).map(m => m.title);
    if (near.length > MARKER_TIPS) {
      titles.push(`and ${near.length - MARKER_TIPS} more`);
    }
    tip.textContent = titles.join('\n');
    // on the side of the line with the more room
    const width = u.over.clientWidth;
    const onLeft = left > width / 2;
    tip.style.left = onLeft ? '' : `${left + 8}px`;
    tip.style.right = onLeft ? `${width - left + 8}px` : '';
  };
  return {
    hooks: {
      init: [u => void u.over.appendChild(tip)],
      draw: [
        u => {
          const markers = live.current.markers ?? [];
          drawMarkers(u, markers);
          const count = String(markers.length);
          if (box.dataset.markers !== count) {
            box.dataset.markers = count; // unchanged, the DOM is left alone
          }
        }
      ],
      setCursor: [hover]
    }
  };
}

function options(
  props: ITimeChartProps,
  live: React.MutableRefObject<ITimeChartProps>,
  box: HTMLElement,
  width: number
): uPlot.Options {
  const text = themeColour('--jp-ui-font-color1', '#000');
  const grid = themeColour('--jp-border-color2', '#ddd');
  // uPlot scales the font by the pixel ratio: it needs a size in px
  const font = `11px ${getComputedStyle(document.body).fontFamily || 'sans-serif'}`;
  const axis = {
    stroke: text,
    font,
    grid: { stroke: grid, width: 1 },
    ticks: { stroke: grid, width: 1, size: 4 }
  };
  const value = (_u: uPlot, v: number | null, si: number, i: number | null) => {
    const own = live.current.own;
    const rows = typeof own === 'function' ? own() : own;
    const shown = rows && i !== null ? rows[si - 1]?.[i] : v;
    return shown === null || shown === undefined
      ? '—'
      : live.current.format(shown);
  };
  return {
    width,
    height: props.height,
    cursor: { y: false, points: { size: 6 } },
    scales: {
      x: { time: true, range: () => live.current.range },
      y: {
        range: (_u, _min, max) => [
          0,
          live.current.yMax ?? (max > 0 ? max * 1.1 : 1)
        ]
      }
    },
    axes: [
      {
        ...axis,
        size: 28,
        space: 60,
        // clock time only (uPlot adds a second line with the date, taller than the axis)
        values: (_u, splits) => {
          const [t0, t1] = live.current.range;
          return splits.map(t =>
            t1 - t0 > 1200 ? TIME(t).slice(0, 5) : TIME(t)
          );
        }
      },
      {
        ...axis,
        size: 64, // fixed: a wider tick label never shifts the plot
        space: 24,
        incrs: props.incrs,
        values: (_u, splits) => splits.map(v => live.current.format(v))
      }
    ],
    series: [
      { value: (_u: uPlot, t: number | null) => (t === null ? '—' : TIME(t)) },
      ...props.series.map(s => ({
        label: s.label,
        stroke: s.colour,
        width: 1.5,
        dash: s.dash,
        fill: s.fill ? withAlpha(s.colour, 0.55) : undefined,
        spanGaps: false,
        points: { show: false },
        value
      }))
    ],
    // a stacked layer fills down to the one below it
    bands: props.series
      .map((s, i) => (s.fill && i > 0 ? { series: [i + 1, i] } : null))
      .filter((b): b is uPlot.Band => b !== null) as uPlot.Band[],
    plugins: [markersPlugin(live, box), meaningsPlugin(props.series)]
  };
}

/** Each legend row's hover says what its series means, where it says. */
function meaningsPlugin(series: IChartSeries[]): uPlot.Plugin {
  const explain = (u: uPlot) => {
    const rows = u.root.querySelectorAll<HTMLElement>('.u-legend .u-series');
    series.forEach((s, i) => {
      const row = rows[i + 1]; // the first row is the time
      if (row && s.meaning) {
        row.title = s.meaning;
      }
    });
  };
  return { hooks: { init: [explain] } };
}

function resolve(columns: ITimeChartProps['columns']): Columns {
  return typeof columns === 'function' ? columns() : columns;
}

export function TimeChart(props: ITimeChartProps): JSX.Element {
  const box = React.useRef<HTMLDivElement>(null);
  const plot = React.useRef<uPlot | null>(null);
  const live = React.useRef(props);
  live.current = props;
  // drawn while on screen; new data that arrives off screen is drawn when it scrolls in
  const onScreen = React.useRef(true);
  const stale = React.useRef(false);
  const draw = () => {
    const node = box.current;
    const chart = plot.current;
    if (!node || !chart) {
      return;
    }
    if (!onScreen.current) {
      stale.current = true;
      return;
    }
    const columns = resolve(live.current.columns);
    node.dataset.samples = String(columns[0].length);
    chart.setData(columns);
    stale.current = false;
  };
  const theme = useTheme();
  const shape = `${props.series.map(s => `${s.label}:${s.colour}`).join('|')}|${props.height}|${theme}`;

  React.useEffect(() => {
    const node = box.current;
    if (!node) {
      return;
    }
    const width = () => Math.max(160, node.clientWidth);
    const columns = resolve(live.current.columns);
    node.dataset.samples = String(columns[0].length);
    const chart = new uPlot(
      options(live.current, live, node, width()),
      columns,
      node
    );
    plot.current = chart;
    const resize = new ResizeObserver(() =>
      chart.setSize({ width: width(), height: live.current.height })
    );
    resize.observe(node);
    const seen = new IntersectionObserver(entries => {
      onScreen.current = entries[entries.length - 1].isIntersecting;
      if (onScreen.current && stale.current) {
        draw();
      }
    });
    seen.observe(node);
    return () => {
      seen.disconnect();
      resize.disconnect();
      chart.destroy();
      plot.current = null;
    };
    // rebuilt only when the series, size or theme change; new data goes through setData
  }, [shape]);

  React.useEffect(draw, [
    props.columns,
    props.range[0],
    props.range[1],
    props.yMax,
    props.markers
  ]);

  return (
    <div
      ref={box}
      className={`jp-gpu-timechart ${props.className ?? ''}`}
      role="img"
      aria-label={props.label}
    />
  );
}
