"""What an operator scrapes from /metrics: types and names by Prometheus' conventions, an info
series, the simulated flag, the NVML fields beyond the panel's, absent (never zero) where a GPU
cannot read them, and per-kernel series that never repeat a label set whatever
c.GPUMonitor.metrics_kernel_labels keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest
from support.jupyter_api import get, start_notebook_kernel
from support.paths import READINGS
from support.prometheus_text import parse, series
from support.stats_files import fixture_device, publish, stats_doc
from support.waiting import wait_for

from jupyter_gpu.cli import main as cli_main
from jupyter_gpu.monitoring import DASHBOARD, RULES
from jupyter_gpu.nvml import NvmlReader
from jupyter_gpu.nvml.fields import CLOCK_THROTTLE_REASONS
from jupyter_gpu.nvml.simulated import SimulatedNVML
from jupyter_gpu.server.metrics import GpuKeys, kernel_allocators, kernel_memory
from jupyter_gpu.server.schema import load

UUID0 = "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5"
GIB = 1024**3


@pytest.fixture(autouse=True)
def not_under_jupyterhub(monkeypatch):
    """These servers are no JupyterHub user's (even when the tests run in a Hub's terminal)."""
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)


async def scrape(jp_fetch) -> str:
    """/metrics once the slow fields (read on their own cadence) are in the latest sample, after
    a kernels call (which refreshes the kernel attribution /metrics reports)."""

    async def slow_fields_read():
        body = await get(jp_fetch, "telemetry")
        ready = body["latest"] and all(g.get("memory_temperature_celsius") for g in body["latest"]["gpus"])
        return body if ready else None

    await wait_for(slow_fields_read)
    await get(jp_fetch, "kernels")
    return (await jp_fetch("metrics")).body.decode()


async def test_gpu_series_follow_prometheus_conventions(jp_fetch, gpu_monitor):
    text = await scrape(jp_fetch)
    families = parse(text)
    kind, (simulated,) = families["jupyter_gpu_simulated"]
    assert kind == "gauge" and simulated.labels == {} and simulated.value == 1.0
    info = [s.labels for s in families["jupyter_gpu_gpu_info"][1]]
    assert all(s.value == 1.0 for s in families["jupyter_gpu_gpu_info"][1])
    assert info[0] == {
        "gpu": "0",
        "uuid": UUID0,
        "name": "NVIDIA H200",
        "pci_bus_id": "00000000:00:06.0",
        "driver_version": "580.159.04",
        "cuda_driver_version": "13.0",
    }
    for counter in ("energy_joules", "ecc_errors", "ecc_lifetime_errors", "remapped_rows"):
        assert families[f"jupyter_gpu_{counter}"][0] == "counter"
        assert all(s.name == f"jupyter_gpu_{counter}_total" for s in families[f"jupyter_gpu_{counter}"][1])
    energy = {s.labels["gpu"]: s.value for s in families["jupyter_gpu_energy_joules"][1]}
    assert energy["0"] > 0
    temps = {s.labels["gpu"]: s.value for s in families["jupyter_gpu_memory_temperature_celsius"][1]}
    assert temps == {"0": 40.0, "1": 40.0}
    throttle = {
        (s.labels["gpu"], s.labels["reason"]): s.value
        for s in families["jupyter_gpu_clock_throttle_active"][1]
    }
    assert len(throttle) == 2 * len(CLOCK_THROTTLE_REASONS)
    assert [key for key, value in throttle.items() if value == 1.0] == [("1", "gpu_idle")]
    ecc = {(s.labels["gpu"], s.labels["error_type"]) for s in families["jupyter_gpu_ecc_errors"][1]}
    assert ecc == {(g, t) for g in "01" for t in ("corrected", "uncorrected")}
    # An H200 has no retired pages (it remaps rows): no series and no HELP line, not a zero.
    assert "retired_pages" not in text
    assert len(series(text)) == len(set(series(text)))


async def test_unsupported_fields_say_why_in_the_api(jp_fetch, gpu_monitor):
    gpu_monitor.simulated_nvml.fail("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu_monitor.simulated_nvml.fail("nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu_monitor.simulated_nvml.fail(
        "nvmlDeviceGetCurrentClocksThrottleReasons", pynvml.NVML_ERROR_NOT_SUPPORTED
    )

    async def counter_refused():  # the energy counter is read on the slow cadence
        body = await get(jp_fetch, "telemetry")
        latest = body["latest"]
        return body if latest and "energy_joules" in latest["gpus"][0]["unsupported"] else None

    body = await wait_for(counter_refused)
    text = await scrape(jp_fetch)
    gpu = body["latest"]["gpus"][0]
    for field in (
        "energy_joules",
        "clock_throttle_reasons",
        "retired_pages_single_bit",
        "retired_pages_pending",
    ):
        assert gpu[field] is None and gpu["unsupported"][field] == "not supported on this GPU"
    assert gpu["remapped_rows_failed"] is False and gpu["ecc_uncorrected_volatile"] == 0
    assert "jupyter_gpu_energy" not in text and "jupyter_gpu_clock_throttle" not in text
    # memory error counts are in the latest sample only: they would bloat the history
    assert all("ecc_corrected_volatile" not in g for sample in body["history"] for g in sample["gpus"])
    assert all("energy_joules" in g for sample in body["history"] for g in sample["gpus"])


def test_an_old_drivers_throttle_reasons_are_found_once():
    """Drivers before 535 have only nvmlDeviceGetCurrentClocksThrottleReasons."""
    nvml = SimulatedNVML.from_file(READINGS)
    nvml.fail("nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    reader = NvmlReader(nvml)
    reader.open()
    for _ in range(3):
        values, unsupported = reader.fast(1)
        assert (
            values["clock_throttle_reasons"] == ["gpu_idle"] and "clock_throttle_reasons" not in unsupported
        )
    assert nvml.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1


def test_field_values_failing_as_a_whole_cost_only_those_fields():
    nvml = SimulatedNVML.from_file(READINGS)
    del nvml.readings["devices"][0]["gpm"]  # a GPU before Hopper: PCIe from NVML's counter, here
    nvml.fail("nvmlDeviceGetFieldValues", pynvml.NVML_ERROR_NOT_SUPPORTED)
    reader = NvmlReader(nvml)
    reader.open()
    values, unsupported = reader.slow(0)
    assert values["pcie_rx_bytes_per_second"] == 458 * 1024
    assert values["memory_temperature_celsius"] is None and values["remapped_rows_correctable"] is None
    assert unsupported["ecc_corrected_volatile"] == "not supported on this GPU"


def test_the_schema_lists_the_throttle_reasons_the_reader_names():
    names = [name for _, name in CLOCK_THROTTLE_REASONS]
    assert load("telemetry")["$defs"]["clock_throttle_reason"]["enum"] == names


async def test_allocator_counts_are_counters_per_kernel_and_notebook(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/train.ipynb")
    publish(gpu_monitor, kernel_id, stats_doc(gpu_monitor, kernel_id, [fixture_device()]))
    families = parse(await scrape(jp_fetch))
    for name, field in (("alloc_retries", "num_alloc_retries"), ("ooms", "num_ooms")):
        kind, samples = families[f"jupyter_gpu_kernel_allocator_{name}"]
        assert kind == "counter"
        (sample,) = samples
        assert sample.name == f"jupyter_gpu_kernel_allocator_{name}_total"
        assert sample.labels == {
            "gpu": "0",
            "uuid": UUID0,
            "kernel_id": kernel_id,
            "notebook_path": "course/train.ipynb",
        }
        assert sample.value == fixture_device()[field]
    (fragmentation,) = families["jupyter_gpu_kernel_allocator_fragmentation_ratio"][1]
    assert fragmentation.value == pytest.approx(fixture_device()["fragmentation"])


# -- c.GPUMonitor.metrics_kernel_labels -------------------------------------------------------


def _kernel(kernel_id: str, path: str | None, used: int, allocator: list[dict]) -> dict:
    return {
        "id": kernel_id,
        "path": path,
        "gpu_memory": [{"gpu_index": 0, "uuid": UUID0, "used_memory_bytes": used, "pids": [1]}],
        "allocator": {"devices": allocator},
    }


def _alloc(reserved: int, split: int, ooms: int) -> dict:
    return {
        "index": 0,
        "uuid": UUID0,
        "allocated_bytes": reserved - split,
        "reserved_bytes": reserved,
        "inactive_split_bytes": split,
        "fragmentation": split / reserved,
        "num_alloc_retries": 0,
        "num_ooms": ooms,
    }


# Two kernels of one notebook (a restart's new kernel beside the old one, or a console), and
# two kernels that belong to no session (no notebook path).
KERNELS = [
    _kernel("k1", "a.ipynb", 1 * GIB, [_alloc(8 * GIB, 2 * GIB, 1)]),
    _kernel("k2", "a.ipynb", 2 * GIB, [_alloc(2 * GIB, 0, 2)]),
    _kernel("k3", None, 4 * GIB, []),
    _kernel("k4", None, 8 * GIB, []),
]


@pytest.mark.parametrize(
    ("mode", "memory"),
    [
        ("both", {("k1", "a.ipynb"): 1, ("k2", "a.ipynb"): 2, ("k3", ""): 4, ("k4", ""): 8}),
        ("kernel", {("k1",): 1, ("k2",): 2, ("k3",): 4, ("k4",): 8}),
        ("notebook", {("a.ipynb",): 3, ("",): 12}),
        ("none", {(): 15}),
    ],
)
def test_kernels_that_share_the_kept_labels_are_summed(mode, memory):
    keep = {"both": ("kernel_id", "notebook_path"), "kernel": ("kernel_id",), "notebook": ("notebook_path",)}
    assert kernel_memory(KERNELS, keep.get(mode, ()), GpuKeys([])) == {
        ("0", UUID0, "", "", *k): v * GIB for k, v in memory.items()
    }


def test_merged_fragmentation_is_trapped_over_reserved_of_the_sum():
    (figures,) = kernel_allocators(KERNELS, ("notebook_path",), GpuKeys([])).values()
    assert figures["reserved_bytes"] == 10 * GIB and figures["num_ooms"] == 3
    assert figures["fragmentation"] == pytest.approx(2 / 10)  # not the mean of 0.25 and 0


class TestNotebookLabelsOnly:
    @pytest.fixture
    def gpu_monitor_config(self, gpu_monitor_config):
        return {**gpu_monitor_config, "metrics_kernel_labels": "notebook"}

    async def test_a_restarted_notebook_keeps_its_series(self, jp_fetch, gpu_monitor):
        kernels = [await start_notebook_kernel(jp_fetch, "same.ipynb") for _ in range(2)]
        for kernel_id in kernels:
            publish(gpu_monitor, kernel_id, stats_doc(gpu_monitor, kernel_id, [fixture_device()]))
        text = await scrape(jp_fetch)
        assert "kernel_id=" not in text
        (ooms,) = parse(text)["jupyter_gpu_kernel_allocator_ooms"][1]
        assert ooms.labels == {"gpu": "0", "uuid": UUID0, "notebook_path": "same.ipynb"}
        assert ooms.value == 2 * fixture_device()["num_ooms"]
        assert len(series(text)) == len(set(series(text)))


class TestUnderJupyterHub:
    @pytest.fixture
    def gpu_monitor_config(self, gpu_monitor_config, monkeypatch):
        monkeypatch.setenv("JUPYTERHUB_USER", "alice")  # as the Hub's spawner starts her server
        return gpu_monitor_config

    async def test_every_series_names_the_student(self, jp_fetch, gpu_monitor):
        kernel_id = await start_notebook_kernel(jp_fetch, "course/train.ipynb")
        publish(gpu_monitor, kernel_id, stats_doc(gpu_monitor, kernel_id, [fixture_device()]))
        text = await scrape(jp_fetch)
        ours = [
            s
            for name, (_, samples) in parse(text).items()
            if name.startswith("jupyter_gpu_")
            for s in samples
        ]
        assert len(ours) > 50 and all(s.labels.get("user") == "alice" for s in ours)
        (ooms,) = parse(text)["jupyter_gpu_kernel_allocator_ooms"][1]
        assert ooms.labels == {
            "gpu": "0",
            "uuid": UUID0,
            "kernel_id": kernel_id,
            "notebook_path": "course/train.ipynb",
            "user": "alice",
        }
        assert len(series(text)) == len(set(series(text)))


# -- the files for operators -------------------------------------------------------------------


def test_jupyter_gpu_grafana_says_where_the_files_are(capsys):
    assert cli_main(["grafana", "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)
    assert paths == {"rules": str(RULES), "dashboard": str(DASHBOARD)}
    assert Path(paths["rules"]).is_file() and json.loads(Path(paths["dashboard"]).read_text())["panels"]
