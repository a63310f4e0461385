"""%gpu_doctor on the environment torch runs in: the allocator settings (parsed as torch would),
CUDA_MODULE_LOADING, /dev/shm, the container's memory limit against the DataLoader's batches,
and a stray pynvml distribution. Each failure is constructed through the doctor's seams and its
verdict asserted."""

from __future__ import annotations

import pytest
from support.doctor_facts import check, healthy

from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.alloc_conf import parse_alloc_conf
from jupyter_gpu.doctor.facts import DataLoaderPlan, MemoryLimit, ShmInfo


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        ("expandable_segments:True", Status.OK, "expandable_segments:True"),
        (
            "roundup_power2_divisions:[256:1,512:2,>:4],max_split_size_mb:128",
            Status.OK,
            "max_split_size_mb:128",
        ),
        (
            "max_split_size_mb:10",
            Status.FAIL,
            "max_split_size_mb:10 must be a whole number of MiB, at least 20",
        ),
        ("garbage_collection_threshold:1.5", Status.FAIL, "strictly between 0 and 1"),
        ("backend:cudaMalloc", Status.FAIL, "must be native or cudaMallocAsync"),
        ("expandable_segments", Status.FAIL, "has no value"),
        ("expandable_segments:true", Status.WARN, "must be True or False"),
        (
            "garbage_collection_threshold:0.6",
            Status.WARN,
            "only acts when a per-process memory fraction is set",
        ),
        ("backend:cudaMallocAsync,max_split_size_mb:128", Status.WARN, "cudaMallocAsync ignores"),
        ("max_split_mb:128", Status.FAIL, "'max_split_mb' is not an allocator option"),
        ("bogus_option:1", Status.FAIL, "'bogus_option' is not an allocator option"),
    ],
)
def test_allocator_config_is_parsed_as_torch_would(value, status, words):
    facts = healthy()
    facts.env["PYTORCH_CUDA_ALLOC_CONF"] = value
    got = check(evaluate(facts), "alloc_conf")
    assert got.status is status and words in got.summary


def test_two_allocator_variables_that_disagree():
    facts = healthy()
    facts.env.update(
        PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", PYTORCH_ALLOC_CONF="max_split_size_mb:64"
    )
    assert check(evaluate(facts), "alloc_conf").status is Status.WARN


def test_allocator_parser_keeps_bracketed_lists_whole():
    options, errors, doubts = parse_alloc_conf(
        "roundup_power2_divisions:[64:8,>:1], expandable_segments:True"
    )
    assert options == {"roundup_power2_divisions": "[64:8,>:1]", "expandable_segments": "True"}
    assert errors == doubts == []


def test_eager_module_loading_is_warned():
    facts = healthy()
    facts.env["CUDA_MODULE_LOADING"] = "EAGER"
    report = evaluate(facts)
    assert check(report, "module_loading").status is Status.WARN
    assert report.verdict.endswith("(1 warning)")


def test_small_or_missing_dev_shm():
    facts = healthy()
    facts.shm = ShmInfo(64 << 20, 64 << 20)  # Docker's default
    got = check(evaluate(facts), "shm")
    assert got.status is Status.WARN and "only 64.0 MiB" in got.summary and "--shm-size" in got.fix
    facts.shm = None
    assert check(evaluate(facts), "shm").status is Status.WARN


def test_the_containers_memory_limit_and_the_dataloader_batches_it_must_hold():
    facts = healthy()
    assert all(c.id != "container_memory" for c in evaluate(facts).checks)  # no limit: nothing to say
    facts.memory_limit = MemoryLimit(16 << 30, 4 << 30)
    got = check(evaluate(facts), "container_memory")
    assert got.status is Status.OK and "16.0 GiB" in got.summary and "12.0 GiB left" in got.summary
    facts.dataloader = DataLoaderPlan(workers=8, batch_bytes=1 << 30)  # 16 GiB of batches in /dev/shm
    got = check(evaluate(facts), "container_memory")
    assert got.status is Status.WARN and "16.0 GiB of batches in /dev/shm count against it" in got.summary
    facts.dataloader = None
    facts.memory_limit = MemoryLimit(16 << 30, 15 << 30)
    got = check(evaluate(facts), "container_memory")
    assert got.status is Status.WARN and "past 90%" in got.summary and "--memory" in got.fix


def test_stray_pynvml_distribution_beside_nvidia_ml_py():
    facts = healthy()
    facts.distributions["pynvml"] = "12.0.0"
    got = check(evaluate(facts), "nvml_package")
    assert got.status is Status.WARN
    assert got.fix == "`pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py`"
