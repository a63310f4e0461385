/**
 * A Jupyter server for GpuModel's unit tests, behind a ServerConnection's
 * `fetch`: it answers the api/gpu routes from what a test sets, logs every
 * request with the (mocked) time it came, and can stop answering or answer
 * an error.
 */
import { ServerConnection } from '@jupyterlab/services';

import type {
  DevicesReply,
  GpuSample,
  KernelsReply,
  Sample,
  TelemetryReply
} from '../types';
import { kernelsReply } from './replies';

const BASE_URL = 'http://localhost:8888/';
const API = '/api/gpu/';

export interface IRequestSeen {
  /** The route below api/gpu/, e.g. 'telemetry'. */
  route: string;
  query: URLSearchParams;
  /** Date.now() when it came. */
  at: number;
}

/** What every route answers instead of its reply. */
export type Failure =
  { unreachable: true } | { status: number; message?: string };

export function gpuSample(index: number): GpuSample {
  return {
    index,
    uuid: `GPU-${index}`,
    mig: null,
    state: 'ok',
    error: null,
    memory_used_bytes: 1024 ** 3,
    memory_total_bytes: 141 * 1024 ** 3,
    utilization_gpu_percent: 50,
    unsupported: {}
  };
}

export class FakeServer {
  readonly requests: IRequestSeen[] = [];
  /** Set to make every request fail; null answers normally. */
  failure: Failure | null = null;
  /** The samples the server holds, oldest first. */
  samples: Sample[] = [];
  kernels: KernelsReply = kernelsReply([]);

  readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings(
    {
      baseUrl: BASE_URL,
      fetch: request => this._answer(request as Request)
    }
  );

  /** The times at which a route was asked, oldest first. */
  times(route: string): number[] {
    return this.requests.filter(r => r.route === route).map(r => r.at);
  }

  /** The `since` of each telemetry request (null where there was none). */
  sinces(): (string | null)[] {
    return this.requests
      .filter(r => r.route === 'telemetry')
      .map(r => r.query.get('since'));
  }

  /** Add a sample of `count` GPUs taken at `t`. */
  addSample(t: number, count = 1): void {
    this.samples.push({
      t,
      gpus: Array.from({ length: count }, (_, i) => gpuSample(i))
    });
  }

  private async _answer(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const route = url.pathname.slice(API.length);
    this.requests.push({ route, query: url.searchParams, at: Date.now() });
    const failure = this.failure;
    if (failure && 'unreachable' in failure) {
      throw new TypeError('Failed to fetch');
    }
    if (failure) {
      return json({ message: failure.message }, failure.status);
    }
    switch (route) {
      case 'telemetry':
        return json(this.telemetry(url.searchParams.get('since')));
      case 'devices':
        return json(this._devices());
      case 'kernels':
        return json(this.kernels);
      default:
        return json({ message: 'Not Found' }, 404);
    }
  }

  /** The telemetry reply to a request with this `since` (null: none). */
  telemetry(since: string | null): TelemetryReply {
    const latest = this.samples[this.samples.length - 1] ?? null;
    return {
      version: 1,
      available: true,
      state: 'ok',
      problem: null,
      reason: null,
      simulated: false,
      interval: 1,
      now: latest?.t ?? 0,
      owners: [],
      latest,
      history: this.samples.filter(s => since === null || s.t > Number(since))
    };
  }

  private _devices(): DevicesReply {
    const gpus = this.samples[this.samples.length - 1]?.gpus ?? [];
    return {
      version: 1,
      available: true,
      state: 'ok',
      problem: null,
      reason: null,
      simulated: false,
      driver_version: '580.159.04',
      cuda_driver_version: '13.0',
      devices: gpus.map(g => ({
        index: g.index,
        uuid: g.uuid,
        name: 'NVIDIA H200',
        pci_bus_id: null,
        memory_total_bytes: g.memory_total_bytes ?? null,
        power_limit_watts: 700,
        mig_mode: null,
        mig: g.mig,
        unsupported: {}
      }))
    };
  }
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}
