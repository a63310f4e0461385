"""Per-cell cost of persistent ranks (%%ddp): one node, and with --slurm across Slurm nodes.

    python benchmarks/ddp_cells.py [--nproc 2] [--cells 50]
    python benchmarks/ddp_cells.py --slurm [--nproc 2] [--cells 50]   # root, Slurm installed

A trivial cell (``x += 1``) and one that all-reduces a tensor, each run ``--cells`` times on
ranks started once by ``%ddp_start`` (gloo on the CPU), through an in-process IPython shell: the
time from the magic's call until every rank has replied, median and 90th percentile.

One node: ``--nproc`` ranks on this machine (the channel is a Unix socket). With ``--slurm``,
also twice as many here (the Slurm run's world size); then the test cluster comes up
(tests/support/slurm_cluster.py: a slurmd per network namespace, its nodes joined by a bridge)
and this script runs again inside ``salloc -N2`` there, with ``%ddp_start --slurm``: ``--nproc``
ranks on each of 2 nodes, one srun job step, the channel TLS over the bridge. The "nodes" share
this machine's cores, so the figures are the software's cost, not a network's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

CELLS = {
    "trivial cell (x += 1)": "x += 1",
    "all_reduce of 1 float": "t = torch.ones(1)\ndist.all_reduce(t)",
}


def cell_times(magic: Callable[[str, str, str | None], Any], source: str, cells: int) -> list[float]:
    """Seconds each of ``cells`` %%ddp cells took on running ranks, sorted (one warm-up first)."""
    magic("ddp", "", source)
    times = []
    for _ in range(cells):
        started = time.perf_counter()
        magic("ddp", "", source)
        times.append(time.perf_counter() - started)
    return sorted(times)


def summary(times: list[float]) -> str:
    """'1.5 ms (p90 1.6 ms)'."""
    p90 = times[int(0.9 * (len(times) - 1))]
    return f"{statistics.median(times) * 1e3:.1f} ms (p90 {p90 * 1e3:.1f} ms)"


def measure(start_line: str, cells: int) -> dict[str, list[float]]:
    """Start persistent ranks with ``%ddp_start start_line`` and time each kind of cell."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu.kernel.ddp.magics import register

    shell = InteractiveShell.instance()
    register(shell)

    def magic(name: str, line: str, cell: str | None = None) -> Any:
        if cell is None:
            return shell.run_line_magic(name, line)
        return shell.run_cell_magic(name, line, cell)

    magic("ddp_start", start_line)
    try:
        magic("ddp", "", "x = 0")
        return {what: cell_times(magic, source, cells) for what, source in CELLS.items()}
    finally:
        magic("ddp_stop", "")


def across_slurm(args: argparse.Namespace) -> dict[str, list[float]]:
    """Bring up a 2-node test cluster and run this script inside an allocation on it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.slurm_cluster import SlurmCluster

    with (
        tempfile.TemporaryDirectory() as tmp,
        SlurmCluster(tmp, nodes=2, cpus_per_node=args.nproc) as cluster,
    ):
        done = cluster.run(
            ["salloc", "-N2", f"--ntasks-per-node={args.nproc}", "--", sys.executable, __file__]
            + ["--inside", "--nproc", str(args.nproc), "--cells", str(args.cells)],
            env={"GLOO_SOCKET_IFNAME": "eth0", "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            timeout=1200,
        )
    line = done.stdout.strip().splitlines()[-1]
    return dict(json.loads(line))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=2, help="ranks per node (default 2)")
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--slurm", action="store_true", help="also across 2 nodes of a test Slurm cluster")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # in the allocation
    args = parser.parse_args()
    gloo = "--backend gloo --device cpu"
    if args.inside:
        print(json.dumps(measure(f"--slurm -n {args.nproc} {gloo}", args.cells)))
        return
    sizes = (args.nproc, 2 * args.nproc) if args.slurm else (args.nproc,)  # and the Slurm run's size
    rows = {f"{n} ranks, one node": measure(f"-n {n} {gloo}", args.cells) for n in sizes}
    if args.slurm:
        rows[f"{2 * args.nproc} ranks, 2 Slurm nodes x {args.nproc}"] = across_slurm(args)
    import torch

    print(
        f"\n%%ddp per-cell cost, {args.cells} cells each; gloo on CPU ({os.cpu_count()} cores shared "
        f"by every rank and node), torch {torch.__version__}\n"
    )
    kinds = list(CELLS)
    width = max(map(len, rows))
    print(f"| {'ranks'.ljust(width)} | " + " | ".join(kinds) + " |")
    print(f"|{'-' * (width + 2)}|" + "---|" * len(kinds))
    for where, times in rows.items():
        print(f"| {where.ljust(width)} | " + " | ".join(summary(times[k]) for k in kinds) + " |")


if __name__ == "__main__":
    main()
