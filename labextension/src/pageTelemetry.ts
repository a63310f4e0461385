/**
 * The latest telemetry sample the server put in the page (`jupyterGpuTelemetry`
 * in page_config: jupyter_gpu/server/page_config.py), so that the status bar's
 * first render has figures, before the settings load and the first poll answers.
 *
 * Read defensively: the page may come from another version of the server, or
 * be old. Anything missing, malformed or too old is ignored, and the first
 * poll fills the model as it always did.
 */
import { PageConfig } from '@jupyterlab/coreutils';

import type { TelemetryReply } from './types';

/** The page_config option the server extension sets. */
export const PAGE_CONFIG_KEY = 'jupyterGpuTelemetry';

/**
 * How old (by the browser's clock) the server's reply may be and still be
 * shown: a page built a moment ago. One read from a cache is older, and its
 * figures are not shown as current. (A browser clock that runs behind the
 * server's only lets more through; one far ahead only loses the head start.)
 */
export const MAX_AGE_SECONDS = 60;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isGpuSample(value: unknown): boolean {
  return (
    isObject(value) &&
    typeof value.index === 'number' &&
    (typeof value.uuid === 'string' || value.uuid === null) &&
    (value.state === 'ok' || value.state === 'lost')
  );
}

function isSample(value: unknown): boolean {
  return (
    isObject(value) &&
    typeof value.t === 'number' &&
    Array.isArray(value.gpus) &&
    value.gpus.every(isGpuSample)
  );
}

/**
 * The telemetry reply in the page's option (its JSON text, or the object
 * itself), or null when it is absent, not a telemetry reply, or older than
 * MAX_AGE_SECONDS at `nowSeconds` (unix time).
 */
export function parsePageTelemetry(
  raw: unknown,
  nowSeconds: number
): TelemetryReply | null {
  let reply: unknown = raw;
  if (typeof raw === 'string') {
    try {
      reply = JSON.parse(raw);
    } catch {
      return null;
    }
  }
  if (
    !isObject(reply) ||
    typeof reply.available !== 'boolean' ||
    typeof reply.state !== 'string' ||
    typeof reply.now !== 'number' ||
    typeof reply.interval !== 'number' ||
    !Array.isArray(reply.owners) ||
    !Array.isArray(reply.history) ||
    !(reply.latest === null || isSample(reply.latest)) ||
    (reply.available && reply.latest === null) ||
    nowSeconds - reply.now > MAX_AGE_SECONDS
  ) {
    return null;
  }
  return reply as unknown as TelemetryReply;
}

/** The telemetry this page came with, if any (see parsePageTelemetry). */
export function pageTelemetry(): TelemetryReply | null {
  return parsePageTelemetry(
    PageConfig.getOption(PAGE_CONFIG_KEY),
    Date.now() / 1000
  );
}
