"""Idle kernels on GPU memory (issue #14) with a real Jupyter server and real kernels: the idle
fields and flag, Prometheus' idle seconds, free cache through the kernel's comm target, the
GPU-aware culler, and who may act."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest
from jupyter_server.auth.authorizer import Authorizer
from support.cli import ENV
from support.jupyter_api import get, start_extensions, start_notebook_kernel, with_server_app
from support.kernel_client import run_cell
from support.server_events import recorded
from support.simulated_gpu import hold
from support.waiting import wait_for
from tornado.httpclient import HTTPClientError

from jupyter_gpu.server.culler import EVENT_ID

GIB = 1024**3


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config) -> dict:
    """Thresholds of seconds, so that kernels go idle within a test."""
    return {**gpu_monitor_config, "idle_after": 2.0, "idle_min_memory": GIB}


async def kernel_entry(jp_fetch, kernel_id: str) -> dict:
    body = await get(jp_fetch, "kernels")
    return next(k for k in body["kernels"] if k["id"] == kernel_id)


async def post(jp_fetch, *path: str) -> dict:
    response = await jp_fetch(*path, method="POST", body="{}")
    return json.loads(response.body) if response.body else {}


async def refused(jp_fetch, *path: str, method: str = "POST") -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*path, method=method, body="{}" if method == "POST" else None)
    body = info.value.response.body or b"{}"
    return info.value.code, json.loads(body).get("message", "")


async def test_an_idle_kernel_on_gpu_memory_is_flagged_and_a_busy_one_is_not(jp_fetch, gpu_monitor):
    holder = await start_notebook_kernel(jp_fetch, "course/week1.ipynb")
    small = await start_notebook_kernel(jp_fetch, "course/small.ipynb")
    busy = await start_notebook_kernel(jp_fetch, "course/busy.ipynb")
    hold(gpu_monitor, holder, 1, 2 * GIB)
    hold(gpu_monitor, small, 0, GIB // 2)
    hold(gpu_monitor, busy, 0, 3 * GIB)
    manager = gpu_monitor.serverapp.kernel_manager
    await run_cell(manager.get_kernel(holder), "x = 1")  # used, as from a notebook, then left
    running = asyncio.ensure_future(run_cell(manager.get_kernel(busy), "import time; time.sleep(30)"))
    try:
        await wait_for(lambda: _state(jp_fetch, busy, "busy"), timeout=30)

        async def flagged():
            mine = await kernel_entry(jp_fetch, holder)
            return mine if mine["idle_holding"] else None

        mine = await wait_for(flagged, timeout=15)
        body = await get(jp_fetch, "kernels")
        assert body["idle_after_seconds"] == 2.0 and body["idle_min_memory_bytes"] == GIB
        assert body["actions_allowed"] is True
        assert mine["execution_state"] == "idle" and mine["memory_bytes"] == 2 * GIB
        assert mine["idle_seconds"] >= 2.0
        # last_activity is the kernel manager's, and idle_seconds counts from it
        model = manager.kernel_model(holder)
        assert model["last_activity"].startswith(
            time.strftime("%Y-%m-%dT", time.gmtime(mine["last_activity"]))
        )
        assert abs(time.time() - mine["last_activity"] - mine["idle_seconds"]) < 5
        assert mine["cull_in_seconds"] is None  # the culler is off by default

        small_entry = await kernel_entry(jp_fetch, small)
        assert small_entry["idle_seconds"] >= 2.0 and small_entry["idle_holding"] is False  # below 1 GiB
        busy_entry = await kernel_entry(jp_fetch, busy)
        assert busy_entry["execution_state"] == "busy" and busy_entry["memory_bytes"] == 3 * GIB
        assert busy_entry["idle_seconds"] is None and busy_entry["idle_holding"] is False
    finally:
        await manager.interrupt_kernel(busy)
        with pytest.raises(AssertionError, match="KeyboardInterrupt"):
            await running


async def _state(jp_fetch, kernel_id: str, state: str):
    return (await kernel_entry(jp_fetch, kernel_id))["execution_state"] == state


async def test_prometheus_reports_each_idle_kernels_idle_seconds(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/week1.ipynb")
    hold(gpu_monitor, kernel_id, 1, 2 * GIB)

    async def reported():
        await get(jp_fetch, "kernels")  # what /metrics reports is the last attribution
        text = (await jp_fetch("metrics")).body.decode()
        lines = [ln for ln in text.splitlines() if ln.startswith("jupyter_gpu_kernel_idle_seconds{")]
        return lines if lines and float(lines[0].rsplit(" ", 1)[1]) > 0 else None

    lines = await wait_for(reported, timeout=15)
    assert len(lines) == 1
    assert f'kernel_id="{kernel_id}"' in lines[0] and 'notebook_path="course/week1.ipynb"' in lines[0]
    assert 'gpu="1"' in lines[0]


async def test_jupyter_gpu_status_shows_idle_time_and_marks_idle_holders(
    jp_fetch, jp_serverapp, jp_http_port, jp_base_url, gpu_monitor
):
    holder = await start_notebook_kernel(jp_fetch, "course/week1.ipynb")
    hold(gpu_monitor, holder, 1, 2 * GIB)

    async def flagged():
        return (await kernel_entry(jp_fetch, holder))["idle_holding"]

    await wait_for(flagged, timeout=15)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "jupyter_gpu", "status"),
        *("--url", f"http://127.0.0.1:{jp_http_port}{jp_base_url}"),
        *("--token", jp_serverapp.identity_provider.token),
        env=ENV,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    text = out.decode()
    row = next(line for line in text.splitlines() if line.startswith("course/week1.ipynb"))
    assert " idle " in row and " s IDLE HOLDER " in row and "2.00 GiB on GPU 1" in row
    assert (
        "IDLE HOLDER: idle at least 2 s while holding at least 1.00 GiB of GPU memory; free its cache "
        "or shut it down from the GPU panel." in text
    )


class TestMetricsWithoutKernelLabels:
    @pytest.fixture
    def gpu_monitor_config(self, gpu_monitor_config):
        return {**gpu_monitor_config, "metrics_kernel_labels": "none"}

    async def test_idle_seconds_are_per_gpu_only(self, jp_fetch, gpu_monitor):
        for path in ("a.ipynb", "b.ipynb"):
            hold(gpu_monitor, await start_notebook_kernel(jp_fetch, path), 1, 2 * GIB)

        async def reported():
            await get(jp_fetch, "kernels")
            text = (await jp_fetch("metrics")).body.decode()
            return [ln for ln in text.splitlines() if ln.startswith("jupyter_gpu_kernel_idle_seconds{")]

        lines = await wait_for(reported, timeout=15)
        # the two kernels share the remaining labels: one series, the longer idle time
        assert len(lines) == 1 and "kernel_id=" not in lines[0] and "notebook_path=" not in lines[0]


# -- free cache -------------------------------------------------------------------------------


async def test_free_cache_reaches_the_kernels_comm_target_without_importing_torch(
    jp_fetch, gpu_monitor, kernel_env
):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/week1.ipynb")
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    await run_cell(kernel, "%load_ext jupyter_gpu")
    await wait_for(lambda: _state(jp_fetch, kernel_id, "idle"), timeout=15)
    reply = await post(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache")
    assert reply == {
        "version": 1,
        "kernel_id": kernel_id,
        "cuda_in_use": False,
        "freed_bytes": 0,
        "devices": [],
        "reason": "PyTorch has not initialised CUDA in this kernel: it holds no cached GPU memory.",
    }
    assert (await run_cell(kernel, "import sys; print('torch' in sys.modules)")).strip() == "False"
    # with torch imported (CPU here) CUDA stays uninitialised
    await run_cell(kernel, "import torch")
    await wait_for(lambda: _state(jp_fetch, kernel_id, "idle"), timeout=15)
    reply = await post(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache")
    assert reply["cuda_in_use"] is False and reply["freed_bytes"] == 0
    assert (await run_cell(kernel, "print(torch.cuda.is_initialized())")).strip() == "False"


async def test_free_cache_refuses_what_it_cannot_do_with_a_message(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "plain.ipynb")
    code, message = await refused(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache")
    assert code == 409 and "jupyter_gpu is not loaded in this kernel" in message
    assert "run `%load_ext jupyter_gpu` in the notebook" in message  # as typed: not %%load_ext

    code, message = await refused(jp_fetch, "api", "gpu", "kernels", "no-such-kernel", "free-cache")
    assert (code, message) == (404, "No kernel with id 'no-such-kernel' on this server.")
    # pid 564 holds memory on simulated GPU 0 and is no kernel of this server
    code, message = await refused(jp_fetch, "api", "gpu", "kernels", "564", "free-cache")
    assert code == 409 and message.startswith("Process 564 is not a kernel of this server")
    for odd in ("9" * 5000, "\u00b2"):  # past int()'s digit limit; a digit int() refuses
        code, message = await refused(jp_fetch, "api", "gpu", "kernels", odd, "free-cache")
        assert code == 404 and message.startswith("No kernel with id")

    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    running = asyncio.ensure_future(run_cell(kernel, "import time; time.sleep(30)"))
    try:
        await wait_for(lambda: _state(jp_fetch, kernel_id, "busy"), timeout=30)
        code, message = await refused(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache")
        assert code == 409 and message.startswith("The kernel is busy")
    finally:
        await gpu_monitor.serverapp.kernel_manager.interrupt_kernel(kernel_id)
        with pytest.raises(AssertionError, match="KeyboardInterrupt"):
            await running
    code, _ = await refused(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache", method="GET")
    assert code == 405


# -- who may act ------------------------------------------------------------------------------


class ReadOnly(Authorizer):
    """A user who may look at everything and change no kernel."""

    def is_authorized(self, handler, user, action, resource) -> bool:
        return not (resource == "kernels" and action == "write")


class TestReadOnlyUser:
    @pytest.fixture
    def jp_server_config(self, jp_server_config):
        return with_server_app(jp_server_config, authorizer=ReadOnly)

    async def test_sees_idle_kernels_but_cannot_act_on_them(self, jp_fetch, gpu_monitor):
        manager = gpu_monitor.serverapp.kernel_manager
        kernel_id = await manager.start_kernel(kernel_name="python3")  # the user cannot start one
        hold(gpu_monitor, kernel_id, 1, 2 * GIB)

        async def flagged():
            mine = await kernel_entry(jp_fetch, kernel_id)
            return mine if mine["idle_holding"] else None

        await wait_for(flagged, timeout=30)
        assert (await get(jp_fetch, "kernels"))["actions_allowed"] is False
        for path, method in [
            (("api", "gpu", "kernels", kernel_id, "free-cache"), "POST"),
            (("api", "kernels", kernel_id, "interrupt"), "POST"),
            (("api", "kernels", kernel_id, "restart"), "POST"),
            (("api", "kernels", kernel_id), "DELETE"),
        ]:
            code, _ = await refused(jp_fetch, *path, method=method)
            assert code == 403, path
        assert kernel_id in manager.list_kernel_ids()


# -- the culler -------------------------------------------------------------------------------


class TestCuller:
    @pytest.fixture
    def gpu_monitor_config(self, gpu_monitor_config):
        return {
            **gpu_monitor_config,
            "cull_idle_after": 4.0,
            "cull_min_memory": 0,
            "cull_warn_before": 2.0,
            "cull_interval": 0.2,
        }

    async def test_shuts_down_an_idle_kernel_and_leaves_a_busy_one(self, jp_fetch, gpu_monitor):
        events = recorded(gpu_monitor.serverapp, EVENT_ID)
        await start_extensions(gpu_monitor)
        manager = gpu_monitor.serverapp.kernel_manager
        idle = await start_notebook_kernel(jp_fetch, "course/week1.ipynb")
        busy = await start_notebook_kernel(jp_fetch, "course/busy.ipynb")
        hold(gpu_monitor, idle, 1, 2 * GIB)
        running = asyncio.ensure_future(run_cell(manager.get_kernel(busy), "import time; time.sleep(60)"))
        try:
            await wait_for(lambda: _state(jp_fetch, busy, "busy"), timeout=30)
            busy_since = time.monotonic()

            async def culled():
                return idle not in manager.list_kernel_ids()

            await wait_for(culled, timeout=30)
            # The busy kernel may be warned while it sat idle before its cell began (seconds, on
            # a loaded machine): that is right. It is never shut down while busy.
            of_idle = [e for e in events if e["kernel_id"] == idle]
            assert [e["action"] for e in of_idle] == ["warn", "cull"]
            warn, cull = of_idle
            assert warn["message"].startswith("GPU kernel of course/week1.ipynb will be shut down in ")
            assert cull["message"].startswith("GPU kernel of course/week1.ipynb was shut down after ")
            assert "idle holding 2.00 GiB. The notebook is unchanged." in cull["message"]
            assert cull["idle_seconds"] >= 4.0 and cull["memory_bytes"] == 2 * GIB

            # the busy kernel has run longer than cull_idle_after without a message: still there
            async def busy_long_enough():
                return time.monotonic() - busy_since > 4.0 + 3 * 0.2

            await wait_for(busy_long_enough, timeout=10)
            assert busy in manager.list_kernel_ids()
            assert not [e for e in events if e["kernel_id"] == busy and e["action"] == "cull"]
        finally:
            await manager.interrupt_kernel(busy)
            with pytest.raises(AssertionError, match="KeyboardInterrupt"):
                await running

    async def test_kernels_with_a_notebook_tab_open_are_spared(self, jp_fetch, jp_ws_fetch, gpu_monitor):
        manager = gpu_monitor.serverapp.kernel_manager
        open_tab = await start_notebook_kernel(jp_fetch, "open.ipynb")
        closed = await start_notebook_kernel(jp_fetch, "closed.ipynb")
        socket = await jp_ws_fetch("api", "kernels", open_tab, "channels")
        await start_extensions(gpu_monitor)
        try:
            await wait_for(lambda: _gone(manager, closed), timeout=30)
            entry = await kernel_entry(jp_fetch, open_tab)
            assert entry["connections"] == 1 and entry["cull_in_seconds"] is None
            assert entry["idle_seconds"] > 4.0 and open_tab in manager.list_kernel_ids()
        finally:
            socket.close()


async def _gone(manager, kernel_id: str) -> bool:
    return kernel_id not in manager.list_kernel_ids()
