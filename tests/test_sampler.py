"""The sampler and the attribution join, without a server."""

from __future__ import annotations

import pynvml
from support.paths import READINGS
from support.waiting import wait_until

from jupyter_gpu.nvml import NvmlReader
from jupyter_gpu.nvml.processes import ProcessMeta
from jupyter_gpu.nvml.simulated import SimulatedNVML
from jupyter_gpu.server.attribution import KernelRef, attribute
from jupyter_gpu.server.sampler import Sampler


def make_sampler(nvml: SimulatedNVML, **kwargs) -> Sampler:
    options = {"interval": 0.02, "slow_interval": 0.5, "history_seconds": 0.2, "retry_interval": 0.05}
    return Sampler(lambda: NvmlReader(nvml), verify_pids=False, **{**options, **kwargs})


def test_history_is_bounded_by_its_duration():
    sampler = make_sampler(SimulatedNVML.from_file(READINGS))
    sampler.start()
    try:
        first = wait_until("ten samples", lambda: len(sampler.since(None)) >= 10 and sampler.since(None)[0])
        wait_until("the oldest sample to be dropped", lambda: sampler.since(None)[0] is not first)
        assert len(sampler.since(None)) == 10  # 0.2 s of history at 0.02 s
    finally:
        sampler.stop()


def test_slow_fields_are_read_far_less_often_than_fast_ones():
    nvml = SimulatedNVML.from_file(READINGS)
    sampler = make_sampler(nvml)
    sampler.start()
    try:
        wait_until("100 temperature reads", lambda: nvml.calls["nvmlDeviceGetTemperature"] >= 100)
    finally:
        sampler.stop()
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] <= nvml.calls["nvmlDeviceGetTemperature"] / 5


def test_sampler_starts_once_the_driver_appears():
    nvml = SimulatedNVML.from_file(READINGS)
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, times=3)
    sampler = make_sampler(nvml)
    sampler.start()
    try:
        wait_until("the no-driver reason", lambda: "No NVIDIA driver" in (sampler.status.reason or ""))
        assert sampler.latest() is None
        wait_until(
            "a sample after the driver came back",
            lambda: sampler.status.available and sampler.latest() is not None,
        )
        assert [d["index"] for d in sampler.status.devices] == [0, 1]
    finally:
        sampler.stop()
    assert not any(t.is_alive() for t in sampler._threads)


def test_no_devices_is_its_own_reason():
    sampler = make_sampler(
        SimulatedNVML({"driver_version": "580", "cuda_driver_version": 13000, "devices": []})
    )
    sampler.start()
    try:
        wait_until(
            "the no-GPUs reason", lambda: sampler.status.reason and "reports no GPUs" in sampler.status.reason
        )
    finally:
        sampler.stop()


GPUS = [
    {
        "index": 0,
        "uuid": "GPU-a",
        "processes": [{"pid": 10, "used_memory_bytes": 100}, {"pid": 11, "used_memory_bytes": 5}],
    },
    {
        "index": 1,
        "uuid": "GPU-b",
        "processes": [
            {"pid": 12, "used_memory_bytes": 7},
            {"pid": 13, "used_memory_bytes": 1},
            {"pid": 14, "used_memory_bytes": None},
        ],
    },
]
META = {
    10: ProcessMeta(10, (1,), "alice", "python -m ipykernel_launcher", True),
    11: ProcessMeta(11, (10, 1), "alice", "dataloader worker", True),  # a child of the kernel
    12: ProcessMeta(12, (1,), "bob", "python train.py", True),  # another user
    13: ProcessMeta(13, same_namespace=False),  # NVML PID from another PID namespace
    14: ProcessMeta(14, (1,), "alice", "python eval.py", True),
}
KERNELS = [KernelRef("k1", "python3", "busy", 10, "a.ipynb"), KernelRef("k2", "python3", "idle", None, None)]


def test_children_count_for_their_kernel_and_others_stay_unattributed():
    view = attribute(KERNELS, GPUS, META, current_user="alice", show_all_users=False)
    k1, k2 = view["kernels"]
    assert k1["gpu_memory"] == [{"gpu_index": 0, "uuid": "GPU-a", "used_memory_bytes": 105, "pids": [10, 11]}]
    assert k2["gpu_memory"] == [] and k2["pid"] is None
    assert [(r["pid"], r["user"], r["command"]) for r in view["unattributed"]] == [
        (13, None, None),
        (14, "alice", "python eval.py"),
    ]
    assert view["hidden_processes"] == 1  # bob's process is counted, not shown


def test_show_all_users_lists_other_users_processes():
    view = attribute(KERNELS, GPUS, META, current_user="alice", show_all_users=True)
    assert {r["pid"]: r["user"] for r in view["unattributed"]}[12] == "bob"
    assert view["hidden_processes"] == 0


def test_a_pid_from_another_namespace_is_never_attributed_even_if_it_matches():
    meta = {**META, 10: ProcessMeta(10, (1,), "alice", "something else", same_namespace=False)}
    view = attribute(KERNELS, GPUS[:1], meta, current_user="alice", show_all_users=False)
    assert view["kernels"][0]["gpu_memory"] == [
        {"gpu_index": 0, "uuid": "GPU-a", "used_memory_bytes": 5, "pids": [11]}
    ]
