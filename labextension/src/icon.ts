import { LabIcon } from '@jupyterlab/ui-components';

/**
 * A graphics card (board, fan, bracket, PCIe fingers): the GPU panel's sidebar, palette and
 * status-bar icon. Not a square chip with pins, which is JupyterLab's kernel icon next to it in
 * the status bar.
 */
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path fill-rule="evenodd" d="M2 6h17a1 1 0 0 1 1 1v10a1 1 0 0 1-1 1H2zm7.5 2.5a4 4 0 1 0 0 8 4 4 0 0 0 0-8zm0 2.5a1.5 1.5 0 1 1 0 3 1.5 1.5 0 0 1 0-3zM15 9h3v1.5h-3zm0 3h3v1.5h-3zm0 3h3v1.5h-3z"/>
    <path d="M21 4h2v16h-2zM5 18h9v2.5H5z"/>
  </g>
</svg>`;

export const gpuIcon = new LabIcon({ name: 'jupyter-gpu:gpu', svgstr });
