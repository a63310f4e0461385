"""%gpu_doctor gathering its facts from real sources: this machine's missing driver, torch asked
in a child process and never CUDA in this one, a probe that ignores modules planted in the
working directory, and a probe failure reported, not raised."""

from __future__ import annotations

import dataclasses

import pytest
from support.doctor_facts import check, healthy

from jupyter_gpu.doctor import Status, diagnose, evaluate
from jupyter_gpu.doctor.facts import read_torch


def test_this_machine_has_no_driver_and_the_doctor_says_so():
    """No GPU here: NVML's library is absent; torch is asked in a child, never in this process."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test describes a machine without a GPU")
    report = diagnose(check_server=False)
    assert not report.cuda_ready
    assert report.verdict.startswith("No GPU: ")
    assert check(report, "torch").status is Status.OK


def test_diagnosing_never_asks_cuda_in_this_process(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is already initialised in this process")

    def forbidden(*args, **kwargs):
        raise AssertionError("the doctor asked CUDA inside the kernel")

    for name in (
        "is_available",
        "device_count",
        "get_device_capability",
        "get_device_properties",
        "init",
        "_lazy_init",
        "current_device",
        "mem_get_info",
    ):
        monkeypatch.setattr(torch.cuda, name, forbidden)
    info = read_torch(dict(__import__("os").environ, CUDA_VISIBLE_DEVICES=""))
    assert info.source == "subprocess" and info.runtime_probed
    assert info.available is False and info.device_count == 0
    assert info.version == torch.__version__  # build facts read here
    assert not torch.cuda.is_initialized()


def test_the_torch_probe_ignores_modules_planted_in_the_working_directory(tmp_path, monkeypatch):
    """`jupyter gpu doctor` run from /tmp: the probe's `python -c` put the working directory first
    on sys.path, and another user's json.py there ran as the caller."""
    marker = tmp_path / "marker"
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "json.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran as you')\nraise SystemExit(0)\n"
    )
    monkeypatch.chdir(tmp_path / "shared")
    info = read_torch(dict(__import__("os").environ))
    assert not marker.exists()
    assert info.source == "subprocess" and info.runtime_error is None


def test_probe_failure_is_reported_not_raised(tmp_path):
    pytest.importorskip("torch")  # imported here: build facts come from this process, runtime from the child
    info = read_torch({}, python=str(tmp_path / "no-python"))
    assert info.installed and not info.runtime_probed and "did not finish" in info.runtime_error
    facts = healthy()
    facts.torch = dataclasses.replace(info, cuda="13.0")
    got = check(evaluate(facts), "cuda")
    assert got.status is Status.WARN and got.summary.startswith("could not ask torch whether CUDA works")
