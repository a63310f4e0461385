/**
 * The user's settings: their defaults, and keeping the model in step with the
 * setting registry.
 */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import type { IGpuSettings } from './tokens';

export const DEFAULT_SETTINGS: IGpuSettings = {
  refreshInterval: 2,
  kernelsInterval: 5,
  gpus: [],
  memoryUnits: 'binary',
  historySeconds: 600,
  showStatusBar: true
};

function readSettings(settings: ISettingRegistry.ISettings): IGpuSettings {
  const composite = settings.composite as Partial<IGpuSettings>;
  return { ...DEFAULT_SETTINGS, ...composite };
}

/**
 * Give `target` the plugin's settings, and again on each change. Resolves once
 * they are applied, or could not be loaded (the defaults stay): never rejects,
 * so that polling starts either way.
 */
export async function followSettings(
  registry: ISettingRegistry | null,
  pluginId: string,
  target: { settings: IGpuSettings }
): Promise<void> {
  if (!registry) {
    return;
  }
  try {
    const settings = await registry.load(pluginId);
    target.settings = readSettings(settings);
    settings.changed.connect(() => {
      target.settings = readSettings(settings);
    });
  } catch (reason) {
    console.error('jupyter-gpu: could not load settings', reason);
  }
}
