"""Attribution when NVML numbers processes of another PID namespace (containers): each kernel
finds its own NVML process (analysis/nvml_identity.py) and the server joins on what it claims,
never on a guess. The server side runs with simulated NVML reporting PIDs no process here has."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.jupyter_api import get, start_notebook_kernel
from support.stats_files import publish, stats_doc
from support.waiting import holds, wait_for

from jupyter_gpu.analysis.nvml_identity import CHANGE_BYTES, NvmlIdentity
from jupyter_gpu.analysis.stats_file import validate

MIB = 2**20
GIB = 2**30
OTHER = 9000  # a process that was on the GPU before the kernel's context
HOST_A, HOST_B = 4_000_001, 4_000_002  # the host's PIDs of two kernels: none of ours


def test_the_only_process_that_appeared_with_the_context_is_the_kernel():
    found = NvmlIdentity(own_pid=57)
    found.before_context({OTHER})
    found.observe({OTHER: 100 * MIB, HOST_A: 600 * MIB}, 2 * MIB)
    assert (found.state, found.pid) == ("matched", HOST_A)


def test_two_kernels_whose_contexts_appeared_in_the_same_second_are_told_apart_by_their_memory():
    a, b = NvmlIdentity(own_pid=57), NvmlIdentity(own_pid=58)
    for kernel in (a, b):
        kernel.before_context({OTHER})
    both = {OTHER: 100 * MIB, HOST_A: 520 * MIB, HOST_B: 520 * MIB}
    a.observe(both, 2 * MIB)
    b.observe(both, 2 * MIB)
    assert a.state == b.state == "ambiguous" and a.pid is None and b.pid is None
    assert a.reason.startswith("2 of NVML's processes could be this kernel")
    # a allocates 4 GiB (its host process grows by that), b 1 GiB: each is now told apart
    moved = {OTHER: 100 * MIB, HOST_A: 520 * MIB + 4 * GIB, HOST_B: 520 * MIB + GIB}
    a.observe(moved, 2 * MIB + 4 * GIB)
    b.observe(moved, 2 * MIB + GIB)
    assert (a.state, a.pid) == ("matched", HOST_A)
    assert (b.state, b.pid) == ("matched", HOST_B)


def test_a_change_below_the_threshold_decides_nothing():
    kernel = NvmlIdentity(own_pid=57)
    both = {HOST_A: 520 * MIB, HOST_B: 520 * MIB}
    kernel.observe(both, 2 * MIB)
    kernel.observe({HOST_A: 520 * MIB + CHANGE_BYTES // 2, HOST_B: 520 * MIB}, 2 * MIB + CHANGE_BYTES // 2)
    assert kernel.state == "ambiguous"


def test_without_a_list_from_before_the_context_a_lone_process_is_not_taken_on_trust():
    kernel = NvmlIdentity(own_pid=57)  # the extension was loaded after CUDA was initialised
    kernel.observe({HOST_A: 600 * MIB}, 2 * MIB)
    assert kernel.state == "ambiguous"  # it could be another container's process
    kernel.observe({HOST_A: 600 * MIB + GIB}, 2 * MIB + GIB)
    assert (kernel.state, kernel.pid) == ("matched", HOST_A)


def test_no_process_that_moves_with_the_allocator_is_unmatched_and_says_so():
    kernel = NvmlIdentity(own_pid=57)
    kernel.before_context(set())
    kernel.observe({HOST_A: 520 * MIB, HOST_B: 520 * MIB}, 2 * MIB)
    kernel.observe({HOST_A: 520 * MIB, HOST_B: 520 * MIB}, 2 * MIB + GIB)  # neither grew with it
    assert (kernel.state, kernel.pid) == ("unmatched", None)
    assert kernel.reason == "no NVML process on this GPU moves with this kernel's PyTorch allocator"


def test_the_kernels_own_pid_in_nvmls_list_means_no_container():
    kernel = NvmlIdentity(own_pid=57)
    kernel.observe({57: 600 * MIB, HOST_A: 600 * MIB}, 2 * MIB)
    assert (kernel.state, kernel.pid) == ("same_namespace", 57)


# -- the server's join ----------------------------------------------------------------------


def on_gpu1(gpu_monitor: Any, *processes: tuple[int, int]) -> None:
    listed = gpu_monitor.simulated_nvml.readings["devices"][1]["compute_processes"]
    listed.extend({"pid": pid, "used_gpu_memory": used} for pid, used in processes)


def claim(gpu_monitor: Any, kernel_id: str, nvml_pid: int | None, match: str | None) -> None:
    doc = json.loads(stats_doc(gpu_monitor, kernel_id, []))
    publish(gpu_monitor, kernel_id, json.dumps({**doc, "nvml_pid": nvml_pid, "nvml_match": match}))


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config: dict) -> dict:
    return {**gpu_monitor_config, "interval": 0.05}


async def kernels_after_sample(jp_fetch: Any, gpu_monitor: Any, pids: set[int]) -> dict[str, Any]:
    """The kernels reply, once the latest sample lists ``pids``."""

    def sampled() -> bool:
        latest = gpu_monitor.sampler.latest()
        return latest is not None and pids <= {
            p["pid"] for g in latest.gpus for p in g.get("processes") or ()
        }

    await wait_for(holds(sampled), 10, what="the sample to list the processes")
    return await get(jp_fetch, "kernels")


async def test_a_kernel_that_matched_its_nvml_process_is_given_its_memory(jp_fetch, gpu_monitor):
    mine = await start_notebook_kernel(jp_fetch, "course/week3/train.ipynb")
    unsure = await start_notebook_kernel(jp_fetch, "course/week3/eval.ipynb")
    on_gpu1(gpu_monitor, (HOST_A, 2 * GIB), (HOST_B, 4 * GIB))
    claim(gpu_monitor, mine, HOST_A, "matched")
    claim(gpu_monitor, unsure, None, "ambiguous")
    reply = await kernels_after_sample(jp_fetch, gpu_monitor, {HOST_A, HOST_B})
    kernels = {k["id"]: k for k in reply["kernels"]}
    assert kernels[mine]["gpu_memory"] == [
        {
            "gpu_index": 1,
            "uuid": kernels[mine]["gpu_memory"][0]["uuid"],
            "used_memory_bytes": 2 * GIB,
            "pids": [HOST_A],
        }
    ]
    assert kernels[unsure]["gpu_memory"] == []
    unattributed = {p["pid"]: p for p in reply["unattributed"]}
    assert HOST_A not in unattributed
    # the one left says why: the kernel still telling its process apart
    assert unattributed[HOST_B]["reason"] == (
        "NVML numbers it in another PID namespace (a container?), so it cannot be followed to a "
        "kernel here; 1 of this server's kernels cannot yet tell which process is its own (it will "
        "once its GPU memory changes)"
    )


async def test_a_kernel_without_the_extension_is_named_as_why_a_process_is_nobodys(jp_fetch, gpu_monitor):
    await start_notebook_kernel(jp_fetch, "plain.ipynb")  # never ran %load_ext jupyter_gpu
    on_gpu1(gpu_monitor, (HOST_A, 2 * GIB))
    reply = await kernels_after_sample(jp_fetch, gpu_monitor, {HOST_A})
    (process,) = [p for p in reply["unattributed"] if p["pid"] == HOST_A]
    assert process["reason"].endswith(
        "1 of this server's kernels has not loaded jupyter_gpu (`%load_ext jupyter_gpu`), which lets a "
        "kernel find its own process"
    )


async def test_a_process_no_kernel_could_claim_is_another_containers(jp_fetch, gpu_monitor, other_process):
    kernel_id = await start_notebook_kernel(jp_fetch, "mine.ipynb")
    claim(gpu_monitor, kernel_id, HOST_A, "matched")
    on_gpu1(gpu_monitor, (HOST_A, GIB), (HOST_B, 3 * GIB), (other_process.pid, GIB))
    reply = await kernels_after_sample(jp_fetch, gpu_monitor, {HOST_A, HOST_B, other_process.pid})
    reasons = {p["pid"]: p["reason"] for p in reply["unattributed"]}
    assert reasons[HOST_B].endswith("no kernel of this server claims it: another container's process")
    assert reasons[other_process.pid] is None  # visible here: its user and command say what it is


async def test_a_pid_two_kernels_claim_is_neither_kernels(jp_fetch, gpu_monitor):
    first = await start_notebook_kernel(jp_fetch, "a.ipynb")
    second = await start_notebook_kernel(jp_fetch, "b.ipynb")
    on_gpu1(gpu_monitor, (HOST_A, 2 * GIB))
    claim(gpu_monitor, first, HOST_A, "matched")
    claim(gpu_monitor, second, HOST_A, "matched")
    reply = await kernels_after_sample(jp_fetch, gpu_monitor, {HOST_A})
    assert all(k["gpu_memory"] == [] for k in reply["kernels"])
    (process,) = [p for p in reply["unattributed"] if p["pid"] == HOST_A]
    assert process["reason"] == "2 kernels of this server claim it, so none is given it: never a guess"


async def test_a_claim_on_a_process_of_this_namespace_is_ignored(jp_fetch, gpu_monitor, other_process):
    """A kernel cannot take memory of a process the server can see (and check) for itself."""
    kernel_id = await start_notebook_kernel(jp_fetch, "greedy.ipynb")
    claim(gpu_monitor, kernel_id, other_process.pid, "matched")
    on_gpu1(gpu_monitor, (other_process.pid, GIB))
    reply = await kernels_after_sample(jp_fetch, gpu_monitor, {other_process.pid})
    (kernel,) = [k for k in reply["kernels"] if k["id"] == kernel_id]
    assert kernel["gpu_memory"] == []


def test_the_stats_file_says_a_pid_exactly_when_it_matched():
    base = {"version": 1, "kernel_id": "k", "pid": 5, "time": 1.0, "cuda_in_use": True, "devices": []}
    assert validate({**base, "nvml_pid": HOST_A, "nvml_match": "matched"}, "k")[0]["nvml_pid"] == HOST_A
    assert validate(base, "k")[0]["nvml_match"] is None  # an older agent: no claim
    for bad in (
        {"nvml_pid": HOST_A, "nvml_match": "ambiguous"},
        {"nvml_pid": None, "nvml_match": "matched"},
        {"nvml_pid": 2**40, "nvml_match": "matched"},
        {"nvml_pid": HOST_A, "nvml_match": "surely"},
    ):
        assert validate({**base, **bad}, "k")[0] is None, bad
