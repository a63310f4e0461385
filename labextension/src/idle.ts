/**
 * Idle kernels on GPU memory: the panel's marking, the status bar's total,
 * what each kernel action's confirmation says will be lost, and the culler's
 * notifications. Pure functions: unit-tested in src/__tests__/idle.test.ts.
 */
import { formatAge, formatBytes, MemoryUnits } from './format';
import { kernelLabel } from './shape';
import type { FreeCacheReply, Kernel, KernelsReply } from './types';
import { eventMessage, IServerEvent } from './serverEvent';

/** The actions the panel offers on a kernel of this server. */
export type KernelAction = 'free-cache' | 'interrupt' | 'restart' | 'shutdown';

export const KERNEL_ACTIONS: KernelAction[] = [
  'free-cache',
  'interrupt',
  'restart',
  'shutdown'
];

/** "idle 42 min · holding 38.0 GiB" for a kernel the server flags, else null. */
export function idleLabel(kernel: Kernel, units: MemoryUnits): string | null {
  if (!kernel.idle_holding) {
    return null;
  }
  return `idle ${formatAge(kernel.idle_seconds)} · holding ${formatBytes(
    kernel.memory_bytes,
    units
  )}`;
}

/** GPU memory held by the kernels the server flags as idle holders. */
export function idleHeldBytes(reply: KernelsReply | null): number {
  if (!reply || reply.state !== 'ok') {
    return 0;
  }
  return reply.kernels
    .filter(k => k.idle_holding)
    .reduce((sum, k) => sum + k.memory_bytes, 0);
}

export interface IConfirmation {
  title: string;
  body: string;
  /** The label of the button that goes ahead. */
  label: string;
}

/** What the confirmation of an action says: what it does and what is lost. */
export function confirmation(
  action: KernelAction,
  kernel: Kernel,
  units: MemoryUnits
): IConfirmation {
  const name = kernelLabel(kernel);
  const held = formatBytes(kernel.memory_bytes, units);
  switch (action) {
    case 'free-cache':
      return {
        title: `Free the GPU cache of ${name}?`,
        body:
          'PyTorch gives the GPU memory it has cached but not in use back to the driver, so ' +
          'that other notebooks can use it. Nothing is lost: variables and tensors stay; the ' +
          "kernel's next large allocations take a little longer.",
        label: 'Free cache'
      };
    case 'interrupt':
      return {
        title: `Interrupt the kernel of ${name}?`,
        body:
          'The cell running now stops with a KeyboardInterrupt, and what it had not finished ' +
          'is lost. Variables and tensors stay, and so does the GPU memory they hold.',
        label: 'Interrupt'
      };
    case 'restart':
      return {
        title: `Restart the kernel of ${name}?`,
        body:
          `Every variable and tensor in this kernel is lost, and the ${held} of GPU memory it ` +
          'holds is freed. The notebook file and its outputs are not changed: run its cells ' +
          'again to get the state back.',
        label: 'Restart'
      };
    case 'shutdown':
      return {
        title: `Shut down the kernel of ${name}?`,
        body:
          `The kernel stops: every variable and tensor in it is lost, and the ${held} of GPU ` +
          'memory it holds is freed. The notebook file is not changed; open it and pick a ' +
          'kernel to run it again.',
        label: 'Shut down'
      };
  }
}

/** What the panel says after an action went through. */
export function actionDone(
  action: KernelAction,
  freed: FreeCacheReply | null,
  units: MemoryUnits
): string {
  switch (action) {
    case 'free-cache':
      if (!freed || !freed.cuda_in_use) {
        return `Nothing to free: ${freed?.reason ?? 'CUDA is not in use.'}`;
      }
      return `Freed ${formatBytes(freed.freed_bytes, units)} of PyTorch's cache.`;
    case 'interrupt':
      return 'Interrupted.';
    case 'restart':
      return 'Restarted.';
    case 'shutdown':
      return 'Shut down.';
  }
}

/** The `$id` of the GPU culler's events (jupyter_gpu/server/events/kernel_culled.json). */
export const CULL_EVENT =
  'https://jupyter-gpu.readthedocs.io/events/kernel-culled';

/** The notification text of a culler event from jupyter_server's event stream, or null. */
export function cullNotice(event: IServerEvent): string | null {
  return eventMessage(event, CULL_EVENT);
}
