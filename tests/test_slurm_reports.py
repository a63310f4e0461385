"""What Slurm says (srun, squeue), read as Slurm's word only where Slurm says it
(jupyter_gpu/ddp/slurm.py, slurm_queue.py): a rank printing the same words mid-line, as a log
line quoting an error would, forges nothing; no Slurm, or one that does not answer, is one line."""

from __future__ import annotations

from support.cli import ENV, cli, one_line_error

from jupyter_gpu.ddp.slurm import TaskEnd, step_failure, task_ends
from jupyter_gpu.ddp.slurm_queue import slurm_seconds


def test_srun_reports_are_read():
    said = ["srun: error: n2: task 3: Exited with exit code 3", "srun: error: n1: task 0: Segmentation fault"]
    assert task_ends(said) == [TaskEnd("n2", 3, 3, None), TaskEnd("n1", 0, 1, "SIGSEGV")]
    refused = "srun: error: Unable to create step for job 1: More processors requested than permitted"
    assert step_failure([refused]) == f"srun refused the job step: {refused}"
    limit = "slurmstepd: error: *** STEP 7.0 ON n1 CANCELLED AT 2026-12-02T08:00:00 DUE TO TIME LIMIT ***"
    assert step_failure([limit]) == f"job 7 reached its time limit and Slurm cancelled the step: {limit}"


def test_a_failed_node_is_named_with_slurms_reason_whichever_line_comes_first():
    said = [
        "slurmstepd-n1: error: *** STEP 6.0 ON n1 CANCELLED AT 2026-12-02T14:52:26 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        "srun: error: Node failure on n2",
        "srun: error: n1: task 0: Terminated",
    ]
    reasons = {"n2": "Not responding"}
    assert (
        step_failure(said, reasons.get)
        == "node n2 failed and Slurm ended the job step; Slurm's reason: Not responding"
    )
    assert (
        step_failure(said, {}.get)
        == "node n2 failed and Slurm ended the job step: srun: error: Node failure on n2"
    )


def test_a_rank_cannot_forge_them():
    forged = [
        "loading shard slurmstepd srun: error: n2: task 1: Segmentation fault",
        "epoch 3: Invalid value in batch (slurmstepd)",
        "  srun: error: n1: task 0: Exited with exit code 9",
        "print('Node failure')",
    ]
    assert task_ends(forged) == []
    assert step_failure(forged, {}.get) is None


def test_squeues_times_are_read_in_seconds():
    times = ["0:07", "59:59", "1:00:00", "2-03:04:05", "UNLIMITED", "INVALID", "", "1-x:00"]
    assert [slurm_seconds(t) for t in times] == [
        7,
        3599,
        3600,
        2 * 86400 + 3 * 3600 + 4 * 60 + 5,
        None,
        None,
        None,
        None,
    ]


def test_status_slurm_without_slurm_is_one_line_and_exit_1(tmp_path):
    """No squeue on PATH, or one that cannot reach its controller: one line, never a traceback."""
    done = cli("status", "--slurm", env={**ENV, "PATH": str(tmp_path)})
    assert (done.returncode, one_line_error(done)) == (
        1,
        "jupyter gpu status: no Slurm on this machine (squeue is not on PATH)",
    )
    squeue = tmp_path / "squeue"  # Slurm's own words when slurmctld does not answer
    squeue.write_text(
        "#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
    )
    squeue.chmod(0o755)
    done = cli("status", "--slurm", "--json", env={**ENV, "PATH": str(tmp_path)})
    assert (done.returncode, one_line_error(done), done.stdout) == (
        1,
        "jupyter gpu status: squeue: error: Unable to contact slurm controller (connect failure)",
        "",
    )
    done = cli("status", "--slurm", "--url", "http://127.0.0.1:1/")
    assert done.returncode == 2 and "--slurm asks Slurm, not a server" in one_line_error(done)
