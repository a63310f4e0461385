"""The server's reader of kernel stats files refuses anything off, with a reason, and never raises."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.stats_files import NOW, fixture_device

from jupyter_gpu.analysis.stats_file import MAX_BYTES, file_name
from jupyter_gpu.runtime_dir import own_path
from jupyter_gpu.server.kernel_stats import read_kernel_stats

KID = "5f1c2d3e-0000-4a4a-9b9b-123456789abc"


def _alive(pid: int) -> bool:
    return True


def _doc(**changes) -> dict:
    doc = {
        "version": 1,
        "kernel_id": KID,
        "pid": 4242,
        "time": NOW - 1,
        "cuda_in_use": True,
        "devices": [fixture_device()],
    }
    doc.update(changes)
    return doc


def _write(runtime: Path, content: bytes | str | dict, mode: int = 0o600) -> Path:
    path = runtime / file_name(KID)
    if isinstance(content, dict):
        content = json.dumps(content)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    os.chmod(path, mode)
    return path


def _read(runtime: Path, **kwargs):
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("pid_alive", _alive)
    return read_kernel_stats(runtime, KID, **kwargs)[:2]  # (stats, reason)


def test_valid_file(tmp_path: Path) -> None:
    doc = _doc()
    doc["devices"][0]["from_a_newer_agent"] = 1
    doc["extra"] = "ignored"
    _write(tmp_path, doc)
    stats, reason = _read(tmp_path)
    assert reason is None
    assert stats["age_seconds"] == pytest.approx(1.0)
    assert stats["pid"] == 4242 and stats["cuda_in_use"] is True
    device = stats["devices"][0]
    assert device["reserved_bytes"] == 2_669_674_496
    assert device["inactive_split_bytes"] == 399_698_944
    assert device["largest_free_block_bytes"] == {"large": 23_068_672, "small": 1_135_616}
    assert device["segments"] == 144
    assert "from_a_newer_agent" not in device and "extra" not in stats


def test_no_cuda_file(tmp_path: Path) -> None:
    _write(tmp_path, _doc(cuda_in_use=False, devices=[]))
    stats, reason = _read(tmp_path)
    assert reason is None and stats["devices"] == [] and stats["cuda_in_use"] is False


def test_missing_file(tmp_path: Path) -> None:
    stats, reason = _read(tmp_path)
    assert stats is None and "not loaded" in reason


def test_empty(tmp_path: Path) -> None:
    _write(tmp_path, b"")
    assert _read(tmp_path) == (None, "stats file is empty")


def test_every_truncation_is_refused(tmp_path: Path) -> None:
    data = json.dumps(_doc()).encode()
    for cut in range(1, len(data)):
        _write(tmp_path, data[:cut])
        stats, reason = _read(tmp_path)
        assert stats is None and reason, cut


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"version": 2}, "unsupported version"),
        ({"version": True}, "unsupported version"),
        ({"kernel_id": "someone-else"}, "kernel_id"),
        ({"pid": "4242"}, "pid"),
        ({"pid": True}, "pid"),
        ({"pid": 0}, "pid"),
        ({"pid": 2**64}, "pid"),
        ({"time": 10**400}, "time"),
        ({"time": "yesterday"}, "time"),
        ({"cuda_in_use": 1}, "cuda_in_use"),
        ({"devices": {"0": {}}}, "devices"),
        ({"devices": [fixture_device()] * 65}, "devices"),
        ({"devices": [[]]}, "device entry"),
        ({"devices": [fixture_device(), fixture_device()]}, "device 0 is listed twice"),
        ({"devices": [fixture_device(), {**fixture_device(), "index": 1}]}, "is listed twice"),  # same uuid
    ],
)
def test_wrong_types(tmp_path: Path, changes: dict, why: str) -> None:
    _write(tmp_path, _doc(**changes))
    stats, reason = _read(tmp_path)
    assert stats is None and "malformed" in reason and why in reason


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("index", -1),
        ("index", 64),
        ("index", True),
        ("uuid", 7),
        ("allocated_bytes", -5),
        ("reserved_bytes", 1.5),
        # Past what a double holds: prometheus_client raised OverflowError on the whole /metrics.
        ("allocated_bytes", 10**400),
        ("num_ooms", 2**53 + 1),
        ("num_alloc_retries", True),
        ("fragmentation", 10**400),
        ("largest_free_block_bytes", {"large": 10**400, "small": 0}),
        ("segments", 2**64),
        ("snapshot_time", 10**400),
        ("num_ooms", None),
        ("fragmentation", 1.5),
        ("fragmentation", "high"),
        ("largest_free_block_bytes", {"large": 1}),
        ("largest_free_block_bytes", [1, 2]),
        ("segments", -1),
        ("snapshot_time", "now"),
        ("expandable_segments", "yes"),
    ],
    ids=lambda v: f"{v}"[:20],
)
def test_wrong_device_fields(tmp_path: Path, key: str, value) -> None:
    device = fixture_device()
    device[key] = value
    _write(tmp_path, _doc(devices=[device]))
    stats, reason = _read(tmp_path)
    assert stats is None and "malformed" in reason and key in reason


@pytest.mark.parametrize("key", ["fragmentation", "snapshot_time"])
def test_a_float_literal_that_overflows_to_infinity(tmp_path: Path, key: str) -> None:
    """``1e999`` is valid JSON; Python reads it as inf (NaN/Infinity literals are refused earlier)."""
    device = {**fixture_device(), key: 0.5}
    _write(tmp_path, json.dumps(_doc(devices=[device])).replace(f'"{key}": 0.5', f'"{key}": 1e999'))
    stats, reason = _read(tmp_path)
    assert stats is None and "malformed" in reason and key in reason


def test_largest_figures_a_double_holds_pass(tmp_path: Path) -> None:
    device = {**fixture_device(), "allocated_bytes": 2**53, "reserved_bytes": 2**53, "fragmentation": 1}
    _write(tmp_path, _doc(devices=[device]))
    stats, reason = _read(tmp_path)
    assert reason is None and stats["devices"][0]["allocated_bytes"] == 2**53


def test_not_a_number_constants(tmp_path: Path) -> None:
    text = json.dumps(_doc()).replace('"time": ' + str(NOW - 1), '"time": NaN')
    _write(tmp_path, text)
    stats, reason = _read(tmp_path)
    assert stats is None and "JSON" in reason


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe garbage", b"[" * 50_000 + b"]" * 50_000, b"null", b"42", b'"text"', b"{}"],
)
def test_garbage(tmp_path: Path, content: bytes) -> None:
    _write(tmp_path, content)
    stats, reason = _read(tmp_path)
    assert stats is None and reason


def test_huge(tmp_path: Path) -> None:
    doc = _doc()
    doc["padding"] = "x" * MAX_BYTES
    _write(tmp_path, doc)
    stats, reason = _read(tmp_path)
    assert stats is None and "larger than" in reason


def test_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(_doc()))
    os.chmod(target, 0o600)
    (tmp_path / file_name(KID)).symlink_to(target)
    assert _read(tmp_path) == (None, "stats file is a symlink")


def test_fifo_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / file_name(KID), 0o600)
    started = time.monotonic()
    assert _read(tmp_path) == (None, "stats file is not a regular file")
    assert time.monotonic() - started < 1.0


def test_directory(tmp_path: Path) -> None:
    (tmp_path / file_name(KID)).mkdir()
    stats, reason = _read(tmp_path)
    assert stats is None and reason == "stats file is not a regular file"


def test_another_users_file(tmp_path: Path) -> None:
    """At the kernel's name, with no file of the kernel's at its private name: refused, not "not loaded"."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    os.chown(_write(tmp_path, _doc()), 65534, 65534)
    stats, reason = _read(tmp_path)
    assert stats is None and reason == "a file of another user holds this kernel's name"
    assert reason.state == "refused"


def test_a_kernel_whose_name_is_taken_is_read_at_its_private_name(tmp_path: Path) -> None:
    """Where the agent moves when another user holds its name (``runtime_dir.own_path``): a name
    made with the key of the kernel's connection file, and there too only this user's own file."""
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    connection = tmp_path / f"kernel-{KID}.json"
    connection.write_text(json.dumps({"key": "a-secret-of-the-kernel"}))
    connection.chmod(0o600)
    os.chown(_write(tmp_path, _doc(pid=1)), 65534, 65534)
    private = own_path(tmp_path / file_name(KID), KID)
    assert private.parent == tmp_path and private.name.startswith(f"jupyter_gpu-kernel-{KID}.")
    private.write_text(json.dumps(_doc()))
    private.chmod(0o600)
    stats, reason = _read(tmp_path)
    assert reason is None and stats["pid"] == 4242
    os.chown(private, 65534, 65534)
    assert _read(tmp_path) == (None, "stats file belongs to another user")
    connection.write_text(json.dumps({"key": "another-key"}))  # without the key, another name
    assert own_path(tmp_path / file_name(KID), KID) != private


def test_writable_by_others(tmp_path: Path) -> None:
    _write(tmp_path, _doc(), mode=0o666)
    assert _read(tmp_path) == (None, "stats file is writable by other users")


def test_stale_pid(tmp_path: Path) -> None:
    _write(tmp_path, _doc())
    stats, reason = _read(tmp_path, pid_alive=lambda pid: False)
    assert stats is None and "process 4242 is gone" in reason


def test_pid_check_that_raises_counts_as_gone(tmp_path: Path) -> None:
    _write(tmp_path, _doc())

    def broken(pid: int) -> bool:
        raise PermissionError

    assert _read(tmp_path, pid_alive=broken)[0] is None


def test_real_pid_check(tmp_path: Path) -> None:
    _write(tmp_path, _doc(pid=os.getpid(), time=time.time()))
    stats, reason = read_kernel_stats(tmp_path, KID)[:2]
    assert reason is None and stats["pid"] == os.getpid()


def test_old_time(tmp_path: Path) -> None:
    _write(tmp_path, _doc(time=NOW - 11))
    stats, reason = _read(tmp_path, max_age=10)
    assert stats is None and "stale: written 11 s ago" in reason


def test_future_time(tmp_path: Path) -> None:
    _write(tmp_path, _doc(time=NOW + 3600))
    stats, reason = _read(tmp_path)
    assert stats is None and "future" in reason


@pytest.mark.parametrize("kernel_id", ["../etc/passwd", "", "a/b", ".hidden", "x" * 200])
def test_bad_kernel_ids_are_not_paths(tmp_path: Path, kernel_id: str) -> None:
    assert read_kernel_stats(tmp_path, kernel_id)[:2] == (None, "not a valid kernel id")
