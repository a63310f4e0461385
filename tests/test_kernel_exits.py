"""Why a kernel died, as the owner reads it in ``api/gpu/exits`` and the event JupyterLab shows:
real kernels of a real server, killed by hand, shut down on request, or dying after a GPU error
(simulated NVML reports the Xid as the driver would)."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from support.jupyter_api import check_reply, get, start_notebook_kernel
from support.kernel_client import run_cell
from support.prometheus_text import parse
from support.server_events import recorded
from support.simulated_gpu import GIB
from support.waiting import holds, wait_for

from jupyter_gpu.server.exits import EVENT_ID


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config: dict) -> dict:
    return {**gpu_monitor_config, "interval": 0.1}  # the kernel view (and the exit log) every 5 s


@pytest.fixture
def died(jp_serverapp: Any) -> list[dict[str, Any]]:
    """The kernel_died events the server emits, as JupyterLab's event stream gets them."""
    return recorded(jp_serverapp, EVENT_ID)


async def exits(jp_fetch: Any) -> list[dict[str, Any]]:
    reply = await get(jp_fetch, "exits")
    check_reply("exits", reply)
    return reply["exits"]


async def watched(gpu_monitor: Any, kernel_id: str) -> int:
    """The kernel's pid, once the exit log watches it (from the kernel's start event)."""
    await wait_for(
        holds(lambda: kernel_id in gpu_monitor.exits.watched), 30, what="the exit log to watch the kernel"
    )
    return gpu_monitor.exits.watched[kernel_id].pid


async def test_a_kernel_killed_by_hand_is_a_signal_exit_named_with_its_notebook(
    jp_fetch, gpu_monitor, kernel_env, died
):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/week3/train.ipynb")
    pid = await watched(gpu_monitor, kernel_id)
    os.kill(pid, signal.SIGKILL)
    listed = await wait_for_exit(jp_fetch)
    assert listed["kernel_id"] == kernel_id and listed["pid"] == pid
    assert listed["path"] == "course/week3/train.ipynb"
    assert listed["cause"] == "signal" and listed["detail"] == "the kernel was ended by SIGKILL"
    await wait_for(holds(lambda: died), 10, what="the kernel_died event")
    assert died[0]["message"] == "course/week3/train.ipynb: the kernel was ended by SIGKILL"
    # The restarter brings a new process; it is watched again, and its death is a second entry.
    manager = gpu_monitor.serverapp.kernel_manager
    await wait_for(
        holds(lambda: manager.get_kernel(kernel_id).provisioner.pid not in (None, pid)),
        60,
        what="the restart",
    )
    new_pid = manager.get_kernel(kernel_id).provisioner.pid
    await wait_for(
        holds(
            lambda: (
                gpu_monitor.exits.watched.get(kernel_id)
                and gpu_monitor.exits.watched[kernel_id].pid == new_pid
            )
        ),
        30,
        what="the restarted kernel to be watched",
    )


async def wait_for_exit(jp_fetch: Any, count: int = 1) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def listed() -> bool:
        found[:] = await exits(jp_fetch)
        return len(found) >= count

    await wait_for(listed, 30, what="the death in api/gpu/exits")
    return found[-1]


async def test_a_kernel_shut_down_or_restarted_on_request_is_not_listed(jp_fetch, gpu_monitor, kernel_env):
    kernel_id = await start_notebook_kernel(jp_fetch, "quiet.ipynb")
    await watched(gpu_monitor, kernel_id)
    await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body="{}")
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    await wait_for(
        holds(lambda: kernel_id not in gpu_monitor.serverapp.kernel_manager), 30, what="the shutdown"
    )
    await gpu_monitor._refresh_kernels()
    assert await exits(jp_fetch) == []
    assert kernel_id not in gpu_monitor.exits.watched


async def test_a_gpu_error_on_the_kernels_gpu_is_named_as_the_cause(jp_fetch, gpu_monitor, kernel_env):
    kernel_id = await start_notebook_kernel(jp_fetch, "gpu.ipynb")
    pid = await watched(gpu_monitor, kernel_id)
    devices = gpu_monitor.simulated_nvml.readings["devices"]
    devices[1]["compute_processes"].append({"pid": pid, "used_gpu_memory": 2 * GIB})
    await wait_for(holds(lambda: gpu_monitor.sampler.latest() is not None), 10, what="a sample")

    async def on_gpu1() -> bool:
        await gpu_monitor._refresh_kernels()
        return gpu_monitor.exits.watched[kernel_id].gpus == {1}

    await wait_for(on_gpu1, 30, what="the kernel to be seen on GPU 1")
    gpu_monitor.simulated_nvml.report_xid(0, 31)  # another GPU: not this kernel's
    gpu_monitor.simulated_nvml.report_xid(1, 79)  # fallen off the bus
    await wait_for(
        holds(lambda: len(gpu_monitor.exits._xids) == 2), 10, what="the XID thread to pass both on"
    )
    os.kill(pid, signal.SIGKILL)
    listed = await wait_for_exit(jp_fetch)
    assert listed["cause"] == "gpu_error"
    assert listed["detail"] == "GPU 1 reported Xid 79; the kernel then died"
    # and Prometheus counts both, by GPU and Xid
    metrics = (await jp_fetch("metrics")).body.decode()
    _, samples = parse(metrics)["jupyter_gpu_xid_errors"]
    counted = {(s.labels["gpu"], s.labels["xid"]): s.value for s in samples if s.name.endswith("_total")}
    assert counted == {("0", "31"): 1.0, ("1", "79"): 1.0}


async def test_host_reports_the_containers_limits_and_each_kernels_resident_memory(
    jp_fetch, gpu_monitor, kernel_env
):
    kernel_id = await start_notebook_kernel(jp_fetch, "host.ipynb")
    pid = await watched(gpu_monitor, kernel_id)
    manager = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    await run_cell(manager, "held = b'x' * (256 * 2**20)")  # written: resident
    await gpu_monitor._refresh_kernels()
    reply = await get(jp_fetch, "host")
    check_reply("host", reply)
    (kernel,) = [k for k in reply["kernels"] if k["id"] == kernel_id]
    assert kernel["pid"] == pid and kernel["rss_bytes"] >= 256 * 2**20
    stat = os.statvfs("/dev/shm")
    assert reply["shm"]["size_bytes"] == stat.f_blocks * stat.f_frsize
    assert reply["cpu"]["available"] == len(os.sched_getaffinity(0))
    assert set(reply["unavailable"]) <= {"memory", "cpu", "pids", "shm"}
    assert json.dumps(reply)  # plain JSON, nothing else
