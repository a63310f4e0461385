/**
 * A stand-in for the browser's `document` in Node, so that GpuModel's polls
 * can be tested: Lumino's Poll sees the tab hidden or shown through
 * `visibilityState` and its event, and JupyterLab's services build their
 * settings from it. Import this before anything that loads @lumino/polling,
 * which reads the page's visibility once, as it loads.
 */

/** The page's address, against which JupyterLab resolves its URLs. */
const PAGE_URL = 'http://localhost:8888/lab';

class FakeDocument extends EventTarget {
  visibilityState: DocumentVisibilityState = 'visible';
  cookie = '';

  /** No `jupyter-config-data` script: PageConfig's defaults apply. */
  getElementById(): null {
    return null;
  }

  /** JupyterLab parses a URL by setting an anchor's href and reading it back. */
  createElement(): { href: string; toString(): string } {
    return {
      href: '',
      toString() {
        return new URL(this.href, PAGE_URL).href;
      }
    };
  }
}

const page = new FakeDocument();
(globalThis as { document?: unknown }).document = page;

/** Show or hide the browser tab, as switching tabs does. */
export function setTabVisible(visible: boolean): void {
  page.visibilityState = visible ? 'visible' : 'hidden';
  page.dispatchEvent(new Event('visibilitychange'));
}
