"""%ddp_save and %ddp_load when things go wrong or someone else is around, with real gloo ranks:
which pickles travel between the ranks, a disk that fills during a save, a damaged checkpoint,
and the folders that a save cut short by a killed kernel leaves behind."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ddp_checkpoints import digest, error_of, ok, saved, start
from support.ddp_kernel import Kernel, rank_processes, wait_gone
from support.other_user import run_as_attacker
from support.waiting import wait_until

from jupyter_gpu.analysis.units import format_bytes

pytest.importorskip("torch")


@pytest.fixture()
def kernel(checkpoint_kernel: Kernel) -> Kernel:
    """The shared DDP kernel, its ranks stopped after each test."""
    return checkpoint_kernel


# Run on the ranks before a save: every pickle an object collective of torch.distributed makes
# (``_object_to_tensor``) or takes from a peer (``_tensor_to_object``), with the collective and
# the first frame outside torch.distributed's own collective code, which is who asked for it.
RECORD = """%%ddp
import sys
import torch.distributed.distributed_c10d as _c10d
_collectives = []
_inside = {_c10d.__name__, "torch.distributed.c10d_logger"}

def _recording(real, what):
    def recorded(*args, **kwargs):
        frame, collective = sys._getframe(1), None
        while frame is not None and frame.f_globals.get("__name__") in _inside:
            if frame.f_globals["__name__"] == _c10d.__name__:
                collective = frame.f_code.co_name  # the outermost: the public function
            frame = frame.f_back
        caller = (frame.f_globals.get("__name__"), frame.f_code.co_name) if frame else (None, None)
        _collectives.append([what, collective, *caller])
        return real(*args, **kwargs)
    return recorded

_c10d._tensor_to_object = _recording(_c10d._tensor_to_object, "unpickle")
_c10d._object_to_tensor = _recording(_c10d._object_to_tensor, "pickle")
"""
RECORDED = "%%ddp --return seen\nseen = list(_collectives)\n_collectives.clear()\n"


def recorded(kernel: Kernel) -> list[list[str]]:
    """What the ranks recorded since the last call, all ranks together."""
    ok(kernel, RECORDED)
    return [
        call
        for calls in json.loads(ok(kernel, "import json\nprint(json.dumps(list(_ddp.values())))").stdout)
        for call in calls
    ]


def test_checkpoints_exchange_pickles_only_inside_dcp(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    ok(kernel, RECORD)
    ok(kernel, f"%ddp_save {ckpt} --model model --optimizer opt")
    during_save = recorded(kernel)
    ok(kernel, f"%ddp_load {ckpt} --model model --optimizer opt")
    during_load = recorded(kernel)
    for calls in (during_save, during_load):
        # DCP's planning does move pickles between the ranks: what the threat model (docs/security.md) names
        assert any(what == "unpickle" for what, *_ in calls), calls
        callers = {(module, function) for _, _, module, function in calls}
        assert all(str(module).startswith("torch.distributed.checkpoint.") for module, _ in callers), callers
        assert not any(str(module).startswith("jupyter_gpu") for module, _ in callers), callers
    # and the recording sees object collectives from anywhere else too
    ok(kernel, "%%ddp\nimport torch.distributed as dist\ndist.broadcast_object_list([RANK], src=0)\n")
    elsewhere = recorded(kernel)
    assert elsewhere and all(call[1] == "broadcast_object_list" for call in elsewhere)
    assert not any(str(call[2]).startswith("torch.distributed.checkpoint.") for call in elsewhere)


# -- a disk that fills up during a save ---------------------------------------------------------------


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs of its own, unmounted after the test."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)


def free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def test_a_disk_that_fills_during_a_save_is_one_line_and_the_previous_checkpoint_loads(
    kernel: Kernel, small_disk: Path
) -> None:
    ckpt = small_disk / "ckpt"
    saved(kernel, ckpt)
    kept = digest(ckpt)
    size = sum(p.stat().st_size for p in ckpt.iterdir())
    # leave room for half a checkpoint: the next save runs out of space part way through
    filler = small_disk / "filler"
    with filler.open("wb") as out:
        out.truncate(0)
        os.posix_fallocate(out.fileno(), 0, free_bytes(small_disk) - size // 2)
    free = free_bytes(small_disk)
    ok(kernel, "%%ddp\nstep(model, opt, 1)\n")

    said = error_of(kernel, f"%ddp_save {ckpt} --model model --optimizer opt")
    first, *rest = said.splitlines()
    assert (
        f"the disk holding {small_disk} is full "
        f"(No space left on device; {format_bytes(free)} were free when the save began)" in first
    ), said
    assert first.endswith(f"the previous checkpoint at {ckpt} is intact"), said
    assert len(rest) <= 1 and all("rank" in line for line in rest), said  # the ranks' usual note, at most
    # nothing half-written stays to fill the disk, and the previous checkpoint is as it was
    assert sorted(os.listdir(small_disk)) == ["ckpt", "filler"] and digest(ckpt) == kept
    # the ranks go on, and load the previous checkpoint
    ok(kernel, "%%ddp\nstep(model, opt, 2)\n")
    assert (
        "Loaded model 'model' and optimizer 'opt'"
        in ok(kernel, f"%ddp_load {ckpt} --model model --optimizer opt").stdout
    )
    filler.unlink()  # room again: the save goes through
    again = ok(kernel, f"%ddp_save {ckpt} --model model --optimizer opt").stdout
    assert "replacing the older checkpoint" in again and digest(ckpt) != kept


# -- folders of saves that never finished ---------------------------------------------------------------


def test_a_save_cut_short_by_a_killed_kernel_is_cleared_by_the_next_save(
    kernel: Kernel, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    victim = Kernel()
    try:
        ok(victim, "%ddp_start -n 2")
        # rank 0 stalls as DCP asks for its state: the save is under way when its kernel dies
        ok(
            victim,
            "%%ddp\nimport time\nmodel = torch.nn.Linear(4, 4)\n"
            "if RANK == 0:\n    model.register_state_dict_pre_hook(lambda *a, **k: time.sleep(3600))\n",
        )
        ranks = [p.pid for p in rank_processes(victim.pid)]
        victim.submit(f"%ddp_save {ckpt} --model model")
        [partial] = wait_until("the save's folder", lambda: list(tmp_path.glob(".ckpt.partial-*")), 60)
        (partial / "__1_0.distcp").write_bytes(b"x" * 4096)  # what a rank had written by then
        os.kill(victim.pid, signal.SIGKILL)
        assert wait_gone(ranks, 30) == []
    finally:
        victim.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [partial.name]

    start(kernel, 2)
    ok(kernel, "%%ddp\nmodel = torch.nn.Linear(4, 4)\n")
    said = ok(kernel, f"%ddp_save {ckpt} --model model").stdout
    assert f"removed {partial.name}, left by a save that never finished" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert "Loaded model 'model'" in ok(kernel, f"%ddp_load {ckpt} --model model").stdout


@pytest.fixture()
def shared_folder() -> Iterator[Path]:
    """A folder like /tmp (root's, sticky, everyone may add to it), that the attacker can reach."""
    folder = Path(tempfile.mkdtemp(prefix="jgpu-ckpt-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


PLANT = """\
import os, sys
shared, precious = sys.argv[1:]
os.mkdir(f"{shared}/.ckpt.partial-theirs01", 0o755)
with open(f"{shared}/.ckpt.partial-theirs01/notes", "w") as out:
    out.write("the attacker's own")
os.symlink(precious, f"{shared}/.ckpt.partial-theirs02")  # hoping the clean-up follows it
os.mkfifo(f"{shared}/.ckpt.partial-theirs03")  # hoping the clean-up blocks on it
print("planted")
"""


def test_the_clean_up_leaves_other_users_links_and_running_saves_alone(
    kernel: Kernel, shared_folder: Path, tmp_path: Path
) -> None:

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("mine")
    planted = run_as_attacker(PLANT, args=(str(shared_folder), str(precious)))
    assert planted.stdout.strip() == "planted", planted.stderr
    # the user's own: a link with a save's name, a save running in another kernel, a stale one
    (shared_folder / ".ckpt.partial-ownlink1").symlink_to(precious)
    running = shared_folder / ".ckpt.partial-running1"
    running.mkdir()
    stale = shared_folder / ".ckpt.partial-leftover"
    stale.mkdir()
    (stale / "__0_0.distcp").write_bytes(b"x" * 4096)
    held = os.open(running, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        start(kernel, 2)
        ok(kernel, "%%ddp\nmodel = torch.nn.Linear(4, 4)\n")
        said = ok(kernel, f"%ddp_save {shared_folder / 'ckpt'} --model model").stdout
    finally:
        os.close(held)
    assert f"removed {stale.name}, left by a save that never finished" in said
    assert sorted(p.name for p in shared_folder.iterdir()) == [
        ".ckpt.partial-ownlink1",
        ".ckpt.partial-running1",
        ".ckpt.partial-theirs01",
        ".ckpt.partial-theirs02",
        ".ckpt.partial-theirs03",
        "ckpt",
    ]
    assert (shared_folder / ".ckpt.partial-theirs01" / "notes").read_text() == "the attacker's own"
    assert (precious / "data").read_text() == "mine"
    assert "Loaded model 'model'" in ok(kernel, f"%ddp_load {shared_folder / 'ckpt'} --model model").stdout


def test_a_damaged_checkpoint_is_one_line_on_load_and_keeps_the_ranks(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    shard = ckpt / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:64])  # a copy that stopped early
    said = error_of(kernel, f"%ddp_load {ckpt} --model model --optimizer opt")
    assert said.startswith(f"cannot load {ckpt}: "), said
    assert len(said.splitlines()) <= 2, said
    ok(kernel, "%%ddp\nstep(model, opt, 1)\n")
    said = error_of(kernel, f"state = %ddp_load_local {ckpt}")  # the whole model, in the kernel
    assert said.startswith(f"UsageError: cannot load {ckpt}: ") and "\n" not in said, said
