"""``%gpu_monitor`` in a real ipykernel, driven like a front end: widget state arrives as comm
messages, updates keep coming from the kernel's thread, and clearing or closing stops them.

NVML is simulated inside the kernel (H200 readings) once the no-GPU case has been seen.
The tests share one kernel and run in file order.
"""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path
from typing import Any

import pytest
from support.machine import HAS_GPU
from support.paths import READINGS

pytest.importorskip("ipywidgets")
from jupyter_client.manager import start_new_kernel  # noqa: E402
from support.kernel_client import run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
THREAD = "jupyter_gpu-monitor"


class Frontend:
    """What a notebook front end sees of one kernel: every iopub message, and comms to reply on."""

    def __init__(self) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        )
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env, startup_timeout=60)
        self.iopub: list[dict[str, Any]] = []

    def run(self, code: str, timeout: float = 60) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Execute a cell; its reply and the iopub messages that arrived meanwhile (any parent)."""
        cell = run(self.kc, code, timeout)
        self.iopub.extend(cell.messages)
        return cell.reply, cell.messages

    def stdout(self, code: str) -> str:
        reply, messages = self.run(code)
        assert reply["status"] == "ok", reply
        return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")

    def pump(self, until: Any, since: int, timeout: float = 10.0) -> dict[str, Any] | None:
        """The first message from index ``since`` on for which ``until(msg)`` holds, reading
        iopub for more (background updates come during and between cells) until it comes."""
        for msg in self.iopub[since:]:
            if until(msg):
                return msg
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                continue
            self.iopub.append(msg)
            if until(msg):
                return msg
        return None

    def send_comm(self, kind: str, comm_id: str, data: dict[str, Any]) -> None:
        self.kc.shell_channel.send(self.kc.session.msg(kind, {"comm_id": comm_id, "data": data}))

    def set_state(self, comm_id: str, **state: Any) -> None:
        """What a front end sends when one of its views changes a model (e.g. its view count)."""
        self.send_comm("comm_msg", comm_id, {"method": "update", "state": state, "buffer_paths": []})

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def frontend():
    fe = Frontend()
    yield fe
    fe.close()


def widgets_of(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """comm id -> state, for every widget the kernel opened, with the updates that followed."""
    states: dict[str, dict[str, Any]] = {}
    for m in messages:
        content = m["content"]
        if m["msg_type"] == "comm_open" and content.get("target_name") == "jupyter.widget":
            states[content["comm_id"]] = dict(content["data"]["state"])
        elif (
            m["msg_type"] == "comm_msg"
            and content["comm_id"] in states
            and content["data"].get("method") == "update"
        ):
            states[content["comm_id"]].update(content["data"]["state"])
    return states


def start_monitor(frontend: Frontend) -> tuple[str, dict[str, dict[str, Any]]]:
    reply, messages = frontend.run("%gpu_monitor --interval 0.1")
    assert reply["status"] == "ok"
    [view] = [
        m["content"]["data"]["application/vnd.jupyter.widget-view+json"]
        for m in messages
        if m["msg_type"] == "display_data"
    ]
    return view["model_id"], widgets_of(messages)


def by_tooltip(widgets: dict[str, dict[str, Any]], tooltip: str) -> str:
    return next(cid for cid, state in widgets.items() if state.get("tooltip") == tooltip)


def update_of(comm_id: str, **expected: Any):
    def match(msg: dict[str, Any]) -> bool:
        if msg["msg_type"] != "comm_msg" or msg["content"]["comm_id"] != comm_id:
            return False
        data = msg["content"]["data"]
        return data.get("method") == "update" and all(data["state"].get(k) == v for k, v in expected.items())

    return match


def closed(comm_id: str):
    return lambda msg: msg["msg_type"] == "comm_close" and msg["content"]["comm_id"] == comm_id


def monitor_threads(frontend: Frontend) -> int:
    return int(
        frontend.stdout(f"import threading; print(sum(t.name == {THREAD!r} for t in threading.enumerate()))")
    )


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_without_a_gpu_it_says_why_and_starts_nothing(frontend):
    assert frontend.run("%load_ext jupyter_gpu")[0]["status"] == "ok"
    reply, messages = frontend.run("%gpu_monitor")
    text = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert text.startswith("gpu_monitor: no GPU to monitor. No NVIDIA driver found")
    assert not widgets_of(messages) and monitor_threads(frontend) == 0


def test_bad_interval_is_a_usage_error(frontend):
    frontend.run("%load_ext jupyter_gpu")
    reply, _ = frontend.run("%gpu_monitor --interval 0.01")
    assert reply["status"] == "error" and reply["ename"] == "UsageError"
    assert "give seconds from 0.1 to 3600" in reply["evalue"]


def test_updates_arrive_as_comm_messages_while_the_kernel_is_idle(frontend):
    frontend.run(
        "from jupyter_gpu.kernel import gpu_memory\n"
        "from jupyter_gpu.nvml.simulated import SimulatedNVML\n"
        f"sim = SimulatedNVML.from_file({str(READINGS)!r})\n"
        "gpu_memory.nvml_backend = lambda: sim"
    )
    root, widgets = start_monitor(frontend)
    labels = sorted(s["value"] for s in widgets.values() if s.get("_model_name") == "LabelModel")
    assert "GPU 0: NVIDIA H200" in labels and "GPU 1: NVIDIA H200" in labels
    assert "3.00 / 140 GiB" in labels and "this kernel: no CUDA in use" in labels
    assert any("simulated readings, every 0.1 s" in str(s.get("value")) for s in widgets.values())
    util0 = by_tooltip(widgets, "GPU 0 utilisation")
    assert widgets[util0]["value"] == 0
    assert widgets[root]["_view_count"] == 0  # asks the front end to count its views

    mark = len(frontend.iopub)
    frontend.run("sim.readings['devices'][0]['utilization']['gpu'] = 64")
    assert frontend.pump(update_of(util0, value=64.0), mark), (
        "the new utilisation never reached the front end"
    )
    frontend.run("sim.readings['devices'][0]['memory_v2']['used'] = 140 * 2**30")
    memory0 = by_tooltip(widgets, "GPU 0 memory used")
    assert frontend.pump(update_of(memory0, bar_style="danger"), mark)
    assert monitor_threads(frontend) == 1
    frontend.run("%gpu_monitor --stop")


def test_clearing_the_output_stops_updates_and_frees_the_widgets(frontend):
    root, widgets = start_monitor(frontend)
    mark = len(frontend.iopub)
    frontend.set_state(root, _view_count=1)  # the front end displayed it ...
    frontend.set_state(root, _view_count=0)  # ... and the output was cleared
    assert frontend.pump(closed(root), mark), "the monitor did not close its widgets"
    assert monitor_threads(frontend) == 0
    mark = len(frontend.iopub)
    frontend.run("sim.readings['devices'][0]['utilization']['gpu'] = 12")
    assert (
        frontend.pump(
            lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] in widgets, mark, timeout=1.0
        )
        is None
    )


def test_a_widget_closed_by_the_front_end_stops(frontend):
    root, widgets = start_monitor(frontend)
    assert monitor_threads(frontend) == 1
    mark = len(frontend.iopub)
    frontend.send_comm("comm_close", root, {})
    assert frontend.pump(closed(by_tooltip(widgets, "GPU 1 utilisation")), mark), "children were not freed"
    assert monitor_threads(frontend) == 0


def test_stop_leaves_the_last_figures_and_says_so(frontend):
    _, widgets = start_monitor(frontend)
    button = next(cid for cid, s in widgets.items() if s.get("_model_name") == "ButtonModel")
    mark = len(frontend.iopub)
    assert frontend.stdout("%gpu_monitor --stop").strip() == "gpu_monitor: stopped 1 monitor"
    assert frontend.pump(update_of(button, disabled=True), mark)
    assert monitor_threads(frontend) == 0


def test_unload_stops_monitors_and_removes_the_magic(frontend):
    start_monitor(frontend)
    frontend.run("%unload_ext jupyter_gpu")
    assert monitor_threads(frontend) == 0
    reply, _ = frontend.run("%gpu_monitor")
    assert reply["status"] == "error" and reply["ename"] == "UsageError"


@pytest.mark.gpu
def test_on_a_gpu_it_shows_nvml_and_this_kernels_allocator():
    fe = Frontend()
    try:
        fe.run("%load_ext jupyter_gpu")
        assert "no CUDA in use" in str(widgets_of(fe.run("%gpu_monitor --interval 0.2")[1]))
        fe.run("%gpu_monitor --stop")
        fe.run("import torch; x = torch.empty(2**30, dtype=torch.uint8, device='cuda')")
        _, widgets = start_monitor(fe)
        labels = [str(s.get("value")) for s in widgets.values() if s.get("_model_name") == "LabelModel"]
        assert any(text.startswith("this kernel (cuda:0): 1.00 GiB allocated") for text in labels), labels
        memory0 = by_tooltip(widgets, "GPU 0 memory used")
        assert widgets[memory0]["value"] > 0 and "NVML, every 0.1 s" in str(widgets)
        fe.run("%gpu_monitor --stop")
    finally:
        fe.close()
