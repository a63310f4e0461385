"""FSDP2 in persistent ranks and DCP checkpoints (%ddp_save, %ddp_load, %ddp_load_local), in a
real kernel with real gloo ranks on the CPU: sharded training matches the unsharded run step for
step, a checkpoint of 2 ranks loads on 1 and on 3 and whole in the kernel, and every bad path
is refused without losing the ranks or the files already there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.ddp_checkpoints import (
    MODEL,
    STEP,
    digest,
    error_of,
    ok,
    saved,
    sharded_training,
    start,
)
from support.ddp_kernel import Kernel

torch = pytest.importorskip("torch")


@pytest.fixture()
def kernel(checkpoint_kernel: Kernel) -> Kernel:
    """The shared DDP kernel, its ranks stopped after each test."""
    return checkpoint_kernel


def plain_losses(steps: int) -> list[float]:
    """The same training in this process, unsharded: the reference."""
    ns: dict = {"torch": torch}
    exec(MODEL + STEP, ns)
    torch.manual_seed(0)
    model = ns["Tiny"]()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return [ns["step"](model, opt, n) for n in range(steps)]


def test_sharded_training_matches_the_unsharded_run_step_for_step(kernel: Kernel) -> None:
    start(kernel, 2)
    cell = ok(kernel, sharded_training(5))
    # shard() says what it did, and each rank's memory shows the sharding: half the parameters
    assert "shard: 3 layers (TransformerEncoderLayer) and the root over 2 ranks (cpu)" in cell.stdout
    lines = [line for line in cell.stdout.splitlines() if line.startswith("rank ")]
    assert [line.split(":")[0] for line in lines] == ["rank 0", "rank 1"], cell.stdout
    for line in lines:
        mine, whole = line.split("parameters ")[1].split(",")[0].split(" of ")
        assert mine != whole and "optimizer state" in line
    sharded = ok(kernel, "print([sum(v) / len(v) for v in zip(*_ddp.values())])").stdout
    got = [float(x) for x in sharded.strip().strip("[]").split(",")]
    assert got == pytest.approx(plain_losses(5), rel=1e-4, abs=1e-6)


def test_a_checkpoint_of_2_ranks_loads_on_1_and_3_and_whole_in_the_kernel(
    kernel: Kernel, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    said = saved(kernel, ckpt, steps=3)
    assert f"Saved model 'model' and optimizer 'opt' from 2 ranks to {ckpt}: " in said
    assert (ckpt / ".metadata").is_file() and len(list(ckpt.glob("__*_0.distcp"))) == 2
    after = ok(kernel, "%%ddp --return nxt\nnxt = step(model, opt, 3)\n")
    ok(kernel, "_two = sum(_ddp.values()) / 2")

    # the whole model in the kernel, no process group: the same numbers the ranks had saved
    ok(kernel, f"state = %ddp_load_local {ckpt}")
    ns: dict = {"torch": torch}
    exec(MODEL, ns)
    plain = ns["Tiny"]()
    assert set(
        ok(kernel, "print(sorted(state))").stdout.strip().strip("[]").replace("'", "").split(", ")
    ) == set(plain.state_dict())

    for n in (1, 3):
        kernel.run("%ddp_stop")
        start(kernel, n)
        # fresh model and optimizer (another seed): everything must come from the checkpoint
        ok(
            kernel,
            "%%ddp\n" + MODEL + STEP + "torch.manual_seed(7)\nmodel = shard(Tiny(), quiet=True)\n"
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-2)\n",
        )
        loaded = ok(kernel, f"%ddp_load {ckpt} --model model --optimizer opt").stdout
        assert f"on {n} ranks from {ckpt} (saved from 2 ranks)" in loaded
        ok(kernel, "%%ddp --return nxt\nnxt = step(model, opt, 3)\n")
        # the next step continues the saved run exactly: parameters and AdamW's moments came back
        same = ok(kernel, f"print(abs(sum(_ddp.values()) / {n} - _two) < 1e-5 * max(1, abs(_two)))").stdout
        assert same.strip() == "True", (n, after.stdout)
    # and the kernel's whole copy is what the ranks hold after a plain load
    kernel.run("%ddp_stop")
    start(kernel, 2)
    ok(kernel, "%%ddp\n" + MODEL + "torch.manual_seed(3)\nmodel = shard(Tiny(), quiet=True)\n")
    ok(kernel, f"%ddp_load {ckpt} --model model")
    ok(
        kernel,
        "%%ddp --return full\nfrom torch.distributed.checkpoint.state_dict import get_model_state_dict, StateDictOptions\n"
        "full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))\n",
    )
    same = ok(kernel, "import torch\nprint(all(torch.equal(state[k], _ddp[0][k]) for k in state))").stdout
    assert same.strip() == "True"


def test_a_meta_model_in_the_kernel_is_filled_and_an_oversized_load_is_refused(
    kernel: Kernel, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    ok(kernel, MODEL + "with torch.device('meta'):\n    local = Tiny()\n")
    # the kernel says it has almost no memory left: loading would be refused, and nothing made
    ok(
        kernel,
        "import jupyter_gpu.kernel.ddp.local_load as _ll\n_real = _ll.free_bytes\n_ll.free_bytes = lambda d: 1024",
    )
    refused = error_of(kernel, f"%ddp_load_local {ckpt} --model local")
    assert (
        "UsageError" in refused
        and "needs " in refused
        and "1.00 KiB free" in refused
        and "--force" in refused
    )
    assert ok(kernel, "print(next(local.parameters()).is_meta)").stdout.strip() == "True"
    ok(kernel, "_ll.free_bytes = _real")
    loaded = ok(kernel, f"%ddp_load_local {ckpt} --model local").stdout
    assert f"from {ckpt} into local" in loaded
    ok(kernel, "state = %ddp_load_local " + str(ckpt))
    check = "print(all(torch.equal(v, local.state_dict()[k]) for k, v in state.items()), next(local.parameters()).device)"
    assert ok(kernel, check).stdout.strip() == "True cpu"


def test_bad_paths_and_models_are_one_line_and_lose_nothing(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    kept = digest(ckpt)

    # another model's checkpoint is not replaced
    ok(kernel, "%%ddp\nother = shard(torch.nn.Sequential(torch.nn.Linear(3, 3)), quiet=True)\n")
    said = error_of(kernel, f"%ddp_save {ckpt} --model other")
    assert f"{ckpt} holds a checkpoint of another model, left as it was" in said
    assert digest(ckpt) == kept
    # nor is a folder of something else, nor a file; a folder that does not exist cannot be saved in
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    assert "holds no checkpoint" in error_of(kernel, f"%ddp_save {notes} --model model")
    assert (notes / "todo.txt").read_text() == "mine" and len(list(notes.iterdir())) == 1
    assert "is not a checkpoint folder" in error_of(kernel, f"%ddp_save {notes / 'todo.txt'} --model model")
    missing = tmp_path / "no" / "such"
    assert f"{missing} does not exist" in error_of(kernel, f"%ddp_save {missing / 'dir'} --model model")
    # a load whose shapes differ names the tensor; the ranks keep their variables
    ok(kernel, "%%ddp\nwide = shard(torch.nn.Sequential(torch.nn.Linear(8, 64)), quiet=True)\n")
    said = error_of(kernel, f"%ddp_load {ckpt} --model wide")
    assert f"{ckpt} does not fit --model wide" in said and "is missing" in said
    said = error_of(kernel, f"%ddp_load {ckpt} --model nope")
    assert "--model nope: is not defined" in said and "the ranks keep their variables" in said
    assert "is not a Python name" in error_of(kernel, f"%ddp_save {ckpt} --model 'x y'")
    assert error_of(kernel, f"%ddp_load {tmp_path / 'absent'} --model model").endswith(
        f"no checkpoint at {tmp_path / 'absent'}"
    )
    # nothing was lost: the ranks still train, the checkpoint is as saved, no half-written folder
    ok(kernel, "%%ddp\nstep(model, opt, 1)\n")
    assert digest(ckpt) == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "notes"]


def test_a_rank_that_dies_while_saving_leaves_no_checkpoint(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    kept = digest(ckpt)
    # rank 1's model dies as DCP asks for its state
    ok(
        kernel,
        "%%ddp\nimport os\nif RANK == 1:\n    model.register_state_dict_pre_hook(lambda *a, **k: os._exit(3))\n",
    )
    said = kernel.run(f"%ddp_save {ckpt} --model model").traceback
    assert "rank 1" in said and "exit" in said.lower(), said
    assert digest(ckpt) == kept  # the older checkpoint is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no partial folder left


# -- as an attacker on a shared machine: checkpoints are pickles -------------------------------------


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_checkpoint_with_a_strangers_file_is_not_loaded(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    os.chown(ckpt / ".metadata", 65534, 65534)  # a stranger swapped in their own metadata
    said = error_of(kernel, f"%ddp_load {ckpt} --model model")
    assert "is not wholly yours (.metadata" in said and "unpickles" in said
    assert "is not wholly yours" in error_of(kernel, f"state = %ddp_load_local {ckpt}")


def test_a_checkpoint_others_may_write_or_with_a_link_is_not_loaded(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    saved(kernel, ckpt)
    (ckpt / ".metadata").chmod(0o666)
    assert "is not wholly yours (.metadata" in error_of(kernel, f"%ddp_load {ckpt} --model model")
    (ckpt / ".metadata").chmod(0o644)
    shard_file = next(ckpt.glob("__1_0.distcp"))
    elsewhere = tmp_path / "planted.distcp"
    shard_file.rename(elsewhere)
    shard_file.symlink_to(elsewhere)
    assert f"is not wholly yours ({shard_file.name}" in error_of(kernel, f"%ddp_load {ckpt} --model model")
    # and a link planted at the name a save would write is not followed
    target = tmp_path / "planted-link"
    victim = tmp_path / "victim"
    victim.mkdir()
    target.symlink_to(victim)
    assert "exists and is not a checkpoint folder" in error_of(kernel, f"%ddp_save {target} --model model")
    assert list(victim.iterdir()) == []


def test_a_checkpoint_in_a_folder_everyone_may_rename_in_is_not_loaded(
    kernel: Kernel, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    ckpt = shared / "ckpt"
    saved(kernel, ckpt)
    shared.chmod(0o777)  # no sticky bit: anyone may swap the checkpoint folder for their own
    assert "may be changed by its group or every user" in error_of(kernel, f"%ddp_load {ckpt} --model model")
    assert "may be changed by its group or every user" in error_of(kernel, f"%ddp_save {ckpt} --model model")
    shared.chmod(0o1777)  # /tmp's kind, and ours: only the owner of an entry may rename it
    assert "Loaded model 'model'" in ok(kernel, f"%ddp_load {ckpt} --model model").stdout


# -- where the ranks compute ------------------------------------------------------------------------


def test_device_cpu_hides_the_gpus_from_the_ranks(kernel: Kernel) -> None:
    ok(kernel, "%ddp_start -n 2 --device cpu")
    seen = ok(
        kernel,
        "%%ddp --return seen\nimport os\nseen = (str(device), os.environ['CUDA_VISIBLE_DEVICES'], dist.get_backend())\n",
    )
    assert "seen" not in seen.stdout
    assert ok(kernel, "print(_ddp)").stdout.strip() == "{0: ('cpu', '', 'gloo'), 1: ('cpu', '', 'gloo')}"


def test_fsdp_where_it_cannot_shard_is_one_line(kernel: Kernel) -> None:
    said = error_of(kernel, "%ddp_start -n 2 --fsdp --device cpu --backend nccl")
    assert "UsageError: --device cpu needs --backend gloo" in said
    cell = kernel.run("%ddp_start -n 1 --fsdp")
    assert cell.error is None
    said = kernel.run("%%ddp\nshard(torch.nn.Linear(2, 2), cpu_offload=True)\n").traceback
    assert "cpu_offload keeps GPU ranks' shards on the CPU" in said


def test_a_one_shot_launch_shards_too(kernel: Kernel) -> None:
    cell = ok(
        kernel,
        "%%ddp_launch -n 2 --fsdp --return n\n"
        + MODEL
        + "model = shard(Tiny())\nn = sum(p.to_local().numel() for p in model.parameters())\n",
    )
    assert "shard: 3 layers (TransformerEncoderLayer) and the root over 2 ranks (cpu)" in cell.stdout
    assert [line.split(":")[0] for line in cell.stdout.splitlines() if line.startswith("rank ")] == [
        "rank 0",
        "rank 1",
    ]
    ns: dict = {"torch": torch}
    exec(MODEL, ns)
    whole = sum(p.numel() for p in ns["Tiny"]().parameters())
    halves = ok(kernel, "print(sum(_ddp.values()))").stdout.strip()
    assert int(halves) == whole  # the two shards make the whole model, nothing twice


def test_a_folder_the_system_will_not_let_anyone_write_is_one_line(kernel: Kernel) -> None:
    start(kernel, 2)
    ok(kernel, sharded_training(1))
    said = error_of(kernel, "%ddp_save /proc/ckpt --model model")  # even root cannot make it
    assert said.startswith("UsageError: cannot save to /proc/ckpt: ")


def test_a_group_writable_folder_on_the_way_is_refused_for_loads_and_saves(
    kernel: Kernel, tmp_path: Path
) -> None:
    """A team folder (2775): a group member could swap the checkpoint for a pickle of theirs
    between the check and the ranks' reads, or the save's folder for a link to a private one."""
    team = tmp_path / "team"
    team.mkdir()
    saved(kernel, team / "ckpt")
    team.chmod(0o2775)
    for magic in (f"%ddp_load {team / 'ckpt'} --model model", f"%ddp_save {team / 'new'} --model model"):
        assert f"{team} may be changed by its group or every user" in error_of(kernel, magic)
    deeper = team / "mine"
    deeper.mkdir(mode=0o755)
    assert f"{team} may be changed by" in error_of(kernel, f"%ddp_save {deeper / 'ckpt'} --model model")
    assert sorted(p.name for p in team.iterdir()) == ["ckpt", "mine"] and not any(deeper.iterdir())


@pytest.mark.skipif(os.getuid() != 0, reason="a folder of another user needs root to make")
def test_a_sticky_folder_of_another_user_on_the_way_is_refused(kernel: Kernel, tmp_path: Path) -> None:
    """/tmp-like (1777) but the stranger's: its owner may rename what others keep in it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "victim").mkdir()
    saved(kernel, ws / "victim" / "ckpt")
    os.chown(ws, 65534, 65534)
    ws.chmod(0o1777)
    said = error_of(kernel, f"state = %ddp_load_local {ws / 'victim' / 'ckpt'}")
    assert f"{ws} may be changed by another user" in said
    assert f"{ws} may be changed by another user" in error_of(
        kernel, f"%ddp_load {ws / 'victim' / 'ckpt'} --model model"
    )


def test_a_model_on_some_ranks_only_is_one_line_and_keeps_the_ranks(kernel: Kernel, tmp_path: Path) -> None:
    start(kernel, 2)
    ok(kernel, "%%ddp\nif RANK == 0:\n    solo = torch.nn.Linear(2, 2)\nkept = RANK\n")
    said = error_of(kernel, f"%ddp_save {tmp_path / 'solo'} --model solo")
    assert said.startswith("--model solo: is not defined") and "(rank 1;" in said, said
    assert not (tmp_path / "solo").exists() and list(tmp_path.iterdir()) == []
    ok(kernel, "%%ddp --return kept\nkept += 10\n")
    assert ok(kernel, "print(_ddp)").stdout.strip() == "{0: 10, 1: 11}"  # alive, variables kept


def test_a_user_with_umask_002_can_load_and_save_again(kernel: Kernel, tmp_path: Path) -> None:
    ok(kernel, "import os\n_old_umask = os.umask(0o002)")
    try:
        ckpt = tmp_path / "ckpt"
        saved(kernel, ckpt)
        assert {oct(p.stat().st_mode & 0o777) for p in ckpt.iterdir()} == {"0o644"}
        assert oct(ckpt.stat().st_mode & 0o777) == "0o755"
        assert "Loaded model 'model'" in ok(kernel, f"%ddp_load {ckpt} --model model").stdout
        assert "replacing the older checkpoint" in ok(kernel, f"%ddp_save {ckpt} --model model").stdout
    finally:
        ok(kernel, "os.umask(_old_umask)")


def test_odd_paths_are_one_line(kernel: Kernel, tmp_path: Path) -> None:
    ckpt = tmp_path / "my ckpt"
    said = saved(kernel, Path(f'"{ckpt}"'))  # quoted, with a space: one folder of that name
    assert f"to {ckpt}: " in said and (ckpt / ".metadata").is_file()
    assert "give one path (quote it if it has spaces)" in error_of(kernel, "%ddp_save '' --model model")
    loaded = ok(kernel, f"whole = %ddp_load_local '{ckpt}'")  # quoted, as %ddp_save took it
    assert f"from {ckpt} on cpu" in loaded.stdout and not loaded.stderr
    assert error_of(kernel, f"%ddp_load {tmp_path / ('x' * 300)} --model model").startswith("UsageError: ")
    assert error_of(kernel, "%ddp_load /etc/passwd/x --model model").startswith("UsageError: ")
    (ckpt / ".metadata").write_bytes(b"not a pickle")
    said = error_of(kernel, f'state = %ddp_load_local "{ckpt}"')
    assert said.startswith(f"UsageError: cannot load {ckpt}: ")


def test_a_folder_planted_at_the_target_during_the_save_is_one_line(kernel: Kernel, tmp_path: Path) -> None:
    """Someone makes the target while the ranks write (here rank 0 itself, as DCP asks for its
    state): the rename cannot replace it, the cell says so, and nothing is left half-done."""
    start(kernel, 2)
    target = tmp_path / "ckpt"
    ok(
        kernel,
        "%%ddp\nimport os\nmodel = torch.nn.Linear(2, 2)\n"
        f"def _plant(*a, **k):\n    os.makedirs({str(target)!r}, exist_ok=True)\n"
        f"    open(os.path.join({str(target)!r}, 'theirs'), 'w').close()\n"
        "if RANK == 0:\n    model.register_state_dict_pre_hook(_plant)\n",
    )
    said = error_of(kernel, f"%ddp_save {target} --model model")
    assert said.startswith(f"UsageError: cannot save to {target}: ") and "nothing was replaced" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"] and os.listdir(target) == ["theirs"]
