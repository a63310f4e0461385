/**
 * A VDomRenderer told when it comes on screen and when it leaves: the panel,
 * the dashboard and the status-bar item start and stop the model's polls this
 * way, so that nothing is fetched for a view nobody sees.
 */
import { VDomRenderer } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';

export abstract class OnScreenRenderer<
  T extends VDomRenderer.IModel
> extends VDomRenderer<T> {
  /**
   * The widget is now on screen (shown and attached) or off it (hidden or
   * detached). The same state may be told twice, e.g. on attach and show.
   */
  protected abstract showing(visible: boolean): void;

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.showing(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.showing(false);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.showing(this.isVisible);
  }

  protected onBeforeDetach(msg: Message): void {
    this.showing(false);
    super.onBeforeDetach(msg);
  }
}
