/**
 * What the panel and the dashboard show around the activity charts: why a
 * GPU has none (in place of the chart), and the hint when the GPU is busy
 * but its SMs mostly idle. The rules are activity.ts's.
 */
import * as React from 'react';

import { launchBound, launchBoundHint } from './activity';
import type { IGpuRef } from './shape';
import type { Sample } from './types';

/** In place of a chart the GPU cannot give, its reason, in the style of unsupported readings. */
export function NotCharted(props: { reason: string }): JSX.Element {
  return (
    <div className="jp-gpu-unsupported jp-gpu-not-charted" data-field="gpm">
      not supported: {props.reason}
    </div>
  );
}

/** The hint, while utilisation is high but SM activity low (activity.ts). */
export function LaunchBoundHint(props: {
  history: Sample[];
  gpu: IGpuRef;
}): JSX.Element | null {
  const lb = launchBound(props.history, props.gpu);
  return lb ? (
    <div className="jp-gpu-hint jp-gpu-launch-bound" data-field="launch-bound">
      {launchBoundHint(lb)}
    </div>
  ) : null;
}
