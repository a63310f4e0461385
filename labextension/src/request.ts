/**
 * Authenticated requests to the jupyter_gpu server extension (POSTs carry
 * jupyter_server's XSRF token, as ServerConnection sends it).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { Replies } from './types';

/** Path of the REST API below the server's base URL. */
export const API_NAMESPACE = 'api/gpu';

/**
 * Thrown when the server answers 404 for our routes: the server extension is
 * not installed or not enabled.
 */
export class ServerExtensionMissing extends Error {
  constructor() {
    super(
      'The jupyter_gpu server extension is not enabled on this Jupyter server. ' +
        'Run `jupyter server extension enable jupyter_gpu` and restart the server.'
    );
    this.name = 'ServerExtensionMissing';
  }
}

/**
 * GET `{baseUrl}api/gpu/{path}` with the session's credentials and return
 * the parsed JSON body, typed by the route's schema. `path` is the route's
 * name unless the route has parameters (`kernels/<id>/cells`).
 */
export async function requestAPI<R extends keyof Replies>(
  route: R,
  settings: ServerConnection.ISettings,
  query: { [key: string]: string | number | undefined } = {},
  path: string = route,
  method: 'GET' | 'POST' = 'GET'
): Promise<Replies[R]> {
  let url = URLExt.join(settings.baseUrl, API_NAMESPACE, path);
  const params = Object.keys(query)
    .filter(k => query[k] !== undefined)
    .map(
      k => `${encodeURIComponent(k)}=${encodeURIComponent(String(query[k]))}`
    );
  if (params.length) {
    url += `?${params.join('&')}`;
  }

  let response: Response;
  try {
    // `no-cache` rather than JupyterLab's default `no-store`, which appends a
    // `?<timestamp>` cache buster that the server's strict query check refuses;
    // the server marks every reply `Cache-Control: no-store` anyway.
    response = await ServerConnection.makeRequest(
      url,
      { method, cache: 'no-cache' },
      settings
    );
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  if (response.status === 404 && path === route) {
    // a parameterised route's 404 is about its parameter (no such kernel)
    throw new ServerExtensionMissing();
  }
  if (!response.ok) {
    let message: string | undefined;
    try {
      message = (await response.json()).message;
    } catch {
      // not JSON: keep the status text
    }
    throw new ServerConnection.ResponseError(response, message);
  }
  return (await response.json()) as Replies[R];
}

/** `GET api/gpu/kernels/<id>/cells`: one kernel's per-cell timeline. */
export function requestCells(
  kernelId: string,
  settings: ServerConnection.ISettings
): Promise<Replies['cells']> {
  return requestAPI(
    'cells',
    settings,
    {},
    `kernels/${encodeURIComponent(kernelId)}/cells`
  );
}

/** `POST api/gpu/kernels/<id>/free-cache`: the kernel empties PyTorch's cache. */
export function requestFreeCache(
  kernelId: string,
  settings: ServerConnection.ISettings
): Promise<Replies['free_cache']> {
  return requestAPI(
    'free_cache',
    settings,
    {},
    `kernels/${encodeURIComponent(kernelId)}/free-cache`,
    'POST'
  );
}
