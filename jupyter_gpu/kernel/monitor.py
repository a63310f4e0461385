"""``%gpu_monitor``: live GPU figures in the cell's output, for front ends without the sidebar.

Notebook 7, VS Code and plain JupyterLab without the server extension still render ipywidgets.
A daemon thread reads NVML every ``--interval`` seconds and sets widget values; each change
travels to the front end as a comm message, so updates keep coming while other cells run.

It stops, and releases NVML, when the output is cleared or the cell re-run (the front end
reports its view count dropping to zero), when the front end closes the widget, on its Stop
button, on ``%gpu_monitor --stop``, on ``%unload_ext`` and at kernel exit. Like the agent it
never initialises CUDA: this kernel's allocator figures appear once the user's code has.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..analysis.units import format_bytes, format_bytes_of
from ..torch_state import nvml_uuid, torch_in_use
from .extension import unregister_magics
from .magic_args import parse as parse_args
from .server_readings import ServerReader

MIN_INTERVAL = 0.1  # NVML answers in microseconds, but each update is a message per widget
MAX_INTERVAL = 3600.0
_monitors: list[Monitor] = []  # running in this kernel, for --stop, unload and exit


class GpuRow:
    """One GPU's widgets: name, utilisation bar, memory bar, this kernel's allocator figures."""

    def __init__(self, widgets: Any, index: int, info: dict[str, Any]) -> None:
        self.index = index
        self.uuid = info.get("uuid")
        label = f"GPU {index}: {info.get('name') or 'unknown'}"
        self.name = widgets.Label(label, layout=widgets.Layout(width="13em"))
        self.util = widgets.FloatProgress(
            min=0, max=100, tooltip=f"GPU {index} utilisation", layout=widgets.Layout(width="9em")
        )
        self.util_text = widgets.Label(layout=widgets.Layout(width="5.5em"))
        self.memory = widgets.FloatProgress(
            min=0, max=1, tooltip=f"GPU {index} memory used", layout=widgets.Layout(width="9em")
        )
        self.memory_text = widgets.Label(layout=widgets.Layout(width="11.5em"))
        self.mine = widgets.Label(tooltip=f"this kernel's PyTorch allocator on GPU {index}")
        # In a narrow output the allocator figures wrap onto a line of their own.
        self.box = widgets.HBox(
            [self.name, self.util, self.util_text, self.memory, self.memory_text, self.mine],
            layout=widgets.Layout(flex_flow="row wrap"),
        )

    def show(self, values: dict[str, Any], unsupported: dict[str, str]) -> None:
        util = values.get("utilization_gpu_percent")
        self.util.value = util or 0
        self.util_text.value = "util n/a" if util is None else f"{util:.0f} % util"
        self.util.tooltip = unsupported.get("utilization_gpu_percent", f"GPU {self.index} utilisation")
        used, total = values.get("memory_used_bytes"), values.get("memory_total_bytes")
        self.memory.value = used / total if used is not None and total else 0
        self.memory_text.value = format_bytes_of(used, total)
        self.memory.bar_style = "danger" if self.memory.value > 0.95 else ""

    def lost(self, error: str) -> None:
        self.util.value = self.memory.value = 0
        self.util_text.value = "lost"
        self.memory_text.value = error[:60]

    def allocator(self, text: str) -> None:
        self.mine.value = text


class Monitor:
    """The widgets and the thread that updates them; ``stop`` is safe from any thread, twice."""

    def __init__(
        self, widgets: Any, reader: Any, devices: list[dict[str, Any]], interval: float, simulated: bool
    ) -> None:
        self.reader = reader  # opened by the caller, used only by the updating thread from now on
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uuids: dict[int, str | None] = {}  # CUDA index -> NVML UUID, fixed for the process
        self.rows = [GpuRow(widgets, i, info) for i, info in enumerate(devices)]
        source = "simulated readings" if simulated else "NVML"
        if isinstance(reader, ServerReader):
            source = "the Jupyter server's simulated readings (no GPU in this kernel)"
        self.header = widgets.HTML(f"<b>GPU monitor</b>: {source}, every {interval:g} s")
        self.status = widgets.Label()
        self.button = widgets.Button(
            description="Stop", tooltip="stop updating", layout=widgets.Layout(width="6em")
        )
        self.button.on_click(lambda _: self.stop("stopped"))
        self.widget = widgets.VBox(
            [widgets.HBox([self.header, self.button]), *(r.box for r in self.rows), self.status]
        )
        self._seen_view = False
        self.widget._view_count = 0  # ask the front end to report its views, see _views_changed
        self.widget.observe(self._views_changed, names="_view_count")
        self.widget.comm.on_close(lambda _msg: self.discard())

    def start(self) -> None:
        self.update()
        self._thread = threading.Thread(target=self._run, name="jupyter_gpu-monitor", daemon=True)
        self._thread.start()

    def update(self) -> None:
        """One reading of every GPU (NVML) and of this kernel's allocator (only if CUDA is in use)."""
        from ..nvml import GpuLost

        for row in self.rows:
            try:
                row.show(*self.reader.fast(row.index))
            except GpuLost as error:
                self.reader.forget(row.index)
                row.lost(str(error))
        self._show_allocator()
        self.status.value = f"updated {time.strftime('%H:%M:%S')}"

    def _show_allocator(self) -> None:
        torch = torch_in_use()
        if torch is None:
            for row in self.rows:
                row.allocator("this kernel: no CUDA in use")
            return
        rows = {row.uuid: row for row in self.rows}
        texts: dict[int, str] = {}
        for device in range(torch.cuda.device_count()):
            if device not in self._uuids:
                self._uuids[device] = nvml_uuid(torch, device)
            shown = rows.get(self._uuids[device])
            reserved = torch.cuda.memory_reserved(device)
            if shown is not None and reserved:
                texts[shown.index] = (
                    f"this kernel (cuda:{device}): {format_bytes(torch.cuda.memory_allocated(device))} "
                    f"allocated, {format_bytes(reserved)} reserved"
                )
        for row in self.rows:
            row.allocator(texts.get(row.index, "this kernel: nothing allocated"))

    def _run(self) -> None:
        from ..nvml import NvmlUnavailable

        while not self._stop.wait(self.interval):
            try:
                self.update()
            except NvmlUnavailable as error:
                self.stop(f"stopped: {error.reason}")
            except Exception as error:  # a monitor must never take the kernel's attention
                self.stop(f"stopped: {type(error).__name__}: {error}")

    def _views_changed(self, change: dict[str, Any]) -> None:
        """Views go to zero when the output is cleared or replaced; before the first, wait."""
        if change["new"]:
            self._seen_view = True
        elif self._seen_view:
            self.discard()

    def stop(self, why: str | None) -> None:
        """Stop updating and release NVML; ``why`` goes in the status line (None: widgets untouched)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self.reader.close()
        if self in _monitors:
            _monitors.remove(self)
        if why is not None:
            self.status.value = why
            self.button.disabled = True

    def discard(self) -> None:
        """Nothing shows the monitor any more: stop, and free its widgets in the kernel."""
        self.stop(None)
        for widget in _tree(self.widget):
            widget.close()


def _tree(widget: Any) -> list[Any]:
    """A widget, its children and their layouts and styles, which are widgets with comms too."""
    found = [widget]
    for name in ("layout", "style"):
        if getattr(widget, name, None) is not None:
            found.append(getattr(widget, name))
    for child in getattr(widget, "children", ()):
        found += _tree(child)
    return found


def _stop_all(why: str | None) -> None:
    for monitor in list(_monitors):
        monitor.stop(why)


def start(interval: float) -> Monitor | str:
    """A running monitor of every GPU, or the reason there is nothing to monitor."""
    try:
        import ipywidgets as widgets
    except ImportError:
        raise UsageError(
            "%gpu_monitor needs ipywidgets: pip install ipywidgets, then restart the kernel"
        ) from None
    from ..nvml import GpuLost, NvmlReader, NvmlUnavailable
    from . import gpu_memory

    reader: Any = NvmlReader(gpu_memory.nvml_backend())  # the kernel side's one NVML seam (tests simulate it)
    try:
        devices = [reader.device_info(i)[0] for i in range(reader.open())]
    except (NvmlUnavailable, GpuLost) as error:
        reader.close()
        # No GPU here; a server replaying simulated readings (a demo) can stand in, marked so.
        reader = ServerReader.of_simulated_server()
        if reader is None:
            return getattr(error, "reason", str(error))
        devices = [reader.device_info(i)[0] for i in range(reader.open())]
    monitor = Monitor(widgets, reader, devices, interval, simulated=reader.simulated)
    _monitors.append(monitor)
    try:
        monitor.start()
    except NvmlUnavailable as error:  # the driver went away between opening and reading
        monitor.discard()
        return error.reason
    return monitor


@magics_class
class MonitorMagics(Magics):
    @magic_arguments()
    @argument(
        "--interval",
        type=float,
        default=1.0,
        help=f"seconds between updates (default 1, at least {MIN_INTERVAL:g})",
    )
    @argument("--stop", action="store_true", help="stop every monitor running in this kernel")
    @line_magic
    def gpu_monitor(self, line: str) -> None:
        """Show live GPU utilisation and memory here, updated in the background while cells run.

        One row per GPU: utilisation and memory from NVML, and this kernel's PyTorch allocator
        figures once your code uses CUDA (the monitor never initialises CUDA itself). It stops
        when you clear or re-run its output, press Stop, run ``%gpu_monitor --stop``, or the
        kernel shuts down. Without a usable GPU it says why and starts nothing.
        """
        args = parse_args(self.gpu_monitor, line)
        if args.stop:
            count = len(_monitors)
            _stop_all("stopped by %gpu_monitor --stop")
            print(f"gpu_monitor: stopped {count} monitor{'s' if count != 1 else ''}")
            return
        if not MIN_INTERVAL <= args.interval <= MAX_INTERVAL:
            raise UsageError(
                f"--interval {args.interval:g}: give seconds from {MIN_INTERVAL:g} to {MAX_INTERVAL:g}"
            )
        monitor = start(args.interval)
        if isinstance(monitor, str):
            print(f"gpu_monitor: no GPU to monitor. {monitor}")
            return
        display(monitor.widget)


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = MonitorMagics(ipython)
    ipython.register_magics(magics)
    atexit.register(_stop_all, None)

    def undo() -> None:
        atexit.unregister(_stop_all)
        _stop_all("stopped: jupyter_gpu was unloaded")
        unregister_magics(ipython, magics)

    return undo
