"""The tests' Slurm cluster by hand (root): ``python -m tests.support.slurm_lab up --nodes 2``
brings one up (``slurm_cluster.SlurmCluster``), prints how to reach it and keeps it until Ctrl-C
or ``python -m tests.support.slurm_lab down``; ``up --shell`` opens a shell in its lab namespace
and takes the cluster down when that shell exits.

The cluster lives as long as the process that made it: its namespaces carry that pid, and a
later test run sweeps the namespaces of a dead maker (``slurm_cluster.sweep_stale``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .paths import ROOT
from .slurm_cluster import NETNS_PREFIX, SlurmCluster, SlurmClusterError, _own_namespaces, sweep_stale

DOWN_TIMEOUT_S = 15.0


def _usage(cluster: SlurmCluster, shell: bool) -> str:
    prefix = shlex.join(cluster.prefix())
    nodes = ", ".join(f"{node} {address}" for node, address in cluster.addresses.items())
    return f"""\
Slurm cluster up: nodes {nodes}; controller ctl {cluster.controller_address}; config {cluster.conf}
Run Slurm's commands in its lab namespace{" (this shell is in it)" if shell else " (another terminal, as root)"}:
  {prefix} bash
  then e.g.: sinfo; srun -N2 hostname
  a kernel in an allocation: PYTHONPATH={ROOT} GLOO_SOCKET_IFNAME=eth0 salloc -N2 --ntasks-per-node=2 python -m IPython
  and in it: %load_ext jupyter_gpu, then %%ddp_launch --slurm --backend gloo cells
{"Exit the shell to take it down." if shell else "Ctrl-C here, or `python -m tests.support.slurm_lab down`, takes it down."}"""


def up(nodes: int, cpus: int, shell: bool) -> int:
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    with tempfile.TemporaryDirectory(prefix="slurm-lab-") as folder:
        started = time.monotonic()
        with SlurmCluster(folder, nodes=nodes, cpus_per_node=cpus) as cluster:
            print(_usage(cluster, shell), f"\n(up in {time.monotonic() - started:.1f} s)", flush=True)
            if shell:  # Ctrl-C is the shell's: a Python handler, reset in the shell at exec
                signal.signal(signal.SIGINT, on_signal)
                env = cluster.env({"PS1": "(slurm lab) \\w# "})
                return subprocess.run(
                    [*cluster.prefix(), os.environ.get("SHELL", "bash")], env=env
                ).returncode
            try:
                while not stop:
                    time.sleep(0.2)
            except KeyboardInterrupt:
                pass
            print("taking the cluster down", flush=True)
    return 0


def _makers() -> set[int]:
    """The pids of the live processes that made the clusters still up on this machine."""
    found = (re.fullmatch(rf"{NETNS_PREFIX}(\d+)-[0-9a-f]+-lab", name) for name in _own_namespaces())
    return {int(f[1]) for f in found if f and Path(f"/proc/{f[1]}").exists()}


def down() -> int:
    """SIGTERM to every ``up`` still running here (they stop their clusters), then sweep what
    dead makers left. A test run's cluster (made by pytest) is left alone."""
    ours = [
        pid for pid in _makers() if "slurm_lab" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    ]
    for pid in ours:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while set(ours) & _makers():
        if time.monotonic() > deadline:
            print(
                f"still up after {DOWN_TIMEOUT_S:.0f} s: pids {sorted(set(ours) & _makers())}",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.1)
    swept = sweep_stale()
    print(f"took down {len(ours)} cluster(s); swept {len(swept)} leftover(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.support.slurm_lab", description=__doc__.split("\n\n")[0]
    )
    commands = p.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="bring a cluster up and keep it until Ctrl-C or `down`")
    start.add_argument(
        "--nodes", type=int, default=2, help="slurmd's, each in a namespace of its own (default 2)"
    )
    start.add_argument("--cpus", type=int, default=2, help="CPUs each node offers Slurm (default 2)")
    start.add_argument(
        "--shell", action="store_true", help="open a shell in the lab; its exit takes the cluster down"
    )
    commands.add_parser("down", help="take down every cluster `up` brought up on this machine")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("slurm_lab: needs root (network namespaces)", file=sys.stderr)
        return 2
    try:
        return up(args.nodes, args.cpus, args.shell) if args.command == "up" else down()
    except SlurmClusterError as error:
        print(f"slurm_lab: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
