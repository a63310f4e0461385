"""A real Slurm cluster for tests (root only): Debian's ``slurmctld`` and one ``slurmd`` per node,
each node in a network namespace of its own, so that ``srun`` starts ranks on hosts that are
really apart (their own ``eth0``, address and hostname) on one machine.

Layout, all made by the test and all gone after ``stop()``::

    netns <prefix>-lab   bridge br-<sfx> 10.A.B.1/24, slurmctld (hostname "ctl"), munged,
                         and every client command the test runs (srun, sbatch, salloc, ...)
    netns <prefix>-nK    eth0 10.A.B.(10+K)/24 (a veth whose other end is on the bridge),
                         slurmd under ``unshare --uts`` with hostname nK

No interface or address lives in the root namespace, so runs side by side (pytest-xdist) cannot
clash; the names still carry a pid and a random suffix, so a leftover says whose it was (and a
later run sweeps namespaces whose maker pid is dead). ``eth0`` is the same name on every node:
``GLOO_SOCKET_IFNAME=eth0`` works on all of them (gloo would pick 127.0.0.1 otherwise).

Use::

    with SlurmCluster(tmp_path, nodes=2) as cluster:
        cluster.run(["srun", "-N2", "hostname"]).stdout

A user kernel that calls ``srun`` (``%%ddp_launch --slurm``) must run in the lab namespace too:
start it with ``cluster.popen(argv)`` or put ``cluster.prefix()`` in front of a kernel command.
Its loopback is the lab's, not the test's: give jupyter_client ``transport="ipc"`` (unix
sockets by path cross network namespaces; checked: a KernelManager(transport="ipc") kernel so
started ran srun across both nodes), or run the whole client in the lab namespace.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

NETNS_PREFIX = "jgs"  # jupyter-gpu slurm; every namespace this module makes starts with it
TOOLS = ("slurmctld", "slurmd", "srun", "sinfo", "munged", "ip", "unshare")


class SlurmClusterError(RuntimeError):
    """The cluster did not come up; the message carries the failing daemon's own log tail."""


def need_slurm() -> None:
    """Skip without Slurm (or root), except where JUPYTER_GPU_REQUIRE_SLURM=1 (CI): there it
    fails, so that the cluster tests never pass by not running."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        reason = f"needs {', '.join(missing)} (run .ci/install-slurm)" if missing else "needs root"
        if os.environ.get("JUPYTER_GPU_REQUIRE_SLURM") == "1":
            pytest.fail(f"JUPYTER_GPU_REQUIRE_SLURM=1, but a Slurm cluster {reason}", pytrace=False)
        pytest.skip(f"a Slurm cluster {reason}")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        raise SlurmClusterError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def _netns_pids(name: str) -> list[int]:
    return [int(pid) for pid in _ip("netns", "pids", name, check=False).stdout.split()]


def _kill_netns(names: Sequence[str], timeout: float = 10.0) -> set[int]:
    """SIGKILL every process in the namespaces (daemons, slurmstepd, job steps, kernels) until
    none is left, and return their pids. Not SIGTERM: slurmstepd and srun take seconds over it,
    and nothing in a throwaway cluster has state to save. A process left inside would keep a
    namespace alive after its name is gone."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while pids := [pid for name in names for pid in _netns_pids(name)]:  # again: some forked
        if time.monotonic() > deadline:
            raise SlurmClusterError(f"processes {pids} outlived SIGKILL in {', '.join(names)}")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed.update(pids)
        time.sleep(0.02)
    return killed


def alive(pid: int) -> bool:
    """Running, not a zombie: an orphan's zombie lasts until init reaps it (on some machines,
    seconds later); it holds no namespace, socket or file."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _own_namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def _stale(name: str) -> bool:
    found = re.fullmatch(rf"{NETNS_PREFIX}(\d+)-[0-9a-f]+(-\w+)?", name)
    return bool(found) and not Path(f"/proc/{found[1]}").exists()


def sweep_stale() -> list[str]:
    """Remove the namespaces (with what still runs in them) and socket folders of earlier runs
    whose maker pid is dead (a run killed with SIGKILL could not clean up); return their names."""
    stale = [name for name in _own_namespaces() if _stale(name)]
    _kill_netns(stale)
    for name in stale:
        _ip("netns", "delete", name, check=False)
    for folder in Path("/run").glob(f"{NETNS_PREFIX}*"):
        if _stale(folder.name):
            shutil.rmtree(folder, ignore_errors=True)
            stale.append(str(folder))
    return stale


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
    except FileNotFoundError:
        return "(no such file)"


class SlurmCluster:
    """A controller and ``nodes`` slurmd's with ``cpus_per_node`` CPUs each, under ``tmp_dir``."""

    def __init__(self, tmp_dir: Path | str, nodes: int = 2, cpus_per_node: int = 2) -> None:
        self.suffix = secrets.token_hex(3)
        self.prefix_name = f"{NETNS_PREFIX}{os.getpid()}-{self.suffix}"
        self.lab = f"{self.prefix_name}-lab"
        self.node_names = [f"n{k}" for k in range(1, nodes + 1)]
        self.node_netns = {node: f"{self.prefix_name}-{node}" for node in self.node_names}
        self.bridge = f"br-{self.suffix}"  # lives in the lab namespace; ≤ 15 characters
        a, b = secrets.randbelow(256), secrets.randbelow(256)
        self.subnet = f"10.{a}.{b}"
        self.controller_address = f"{self.subnet}.1"
        self.addresses = {node: f"{self.subnet}.{10 + k}" for k, node in enumerate(self.node_names, 1)}
        self.cpus_per_node = cpus_per_node
        self.dir = Path(tmp_dir) / f"slurm-{self.suffix}"
        self.conf = self.dir / "slurm.conf"
        # Sockets live in a short, traversable folder: munged refuses a socket below a folder
        # others cannot search (pytest's are 0700), and a unix socket path has 107 bytes at most.
        self.run_dir = Path("/run") / self.prefix_name
        self.munge_socket = self.run_dir / "munge.sock"
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}  # "slurmd n1" -> its process
        self._made: list[str] = []  # namespaces, in the order made
        self._clients: list[subprocess.Popen[Any]] = []  # popen()'s, reaped by stop()
        self._killed: set[int] = set()  # every pid stop() ended, for leftovers()

    # --- start -------------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        """Make the network, the config and the daemons; return once every node is idle. On any
        failure everything made so far is undone before the error propagates."""
        try:
            sweep_stale()
            self.dir.mkdir(parents=True)
            self.run_dir.mkdir(mode=0o755)
            self._network()
            self._write_config()
            deadline = time.monotonic() + timeout
            self._start_munged(deadline)
            self._spawn("slurmctld", self.lab, "ctl", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
            for node in self.node_names:
                self._spawn(
                    f"slurmd {node}", self.node_netns[node], node, ["slurmd", "-D", "-f", str(self.conf)]
                )
            self._wait_idle(deadline)
        except BaseException:
            self.stop()
            raise

    def _network(self) -> None:
        _ip("netns", "add", self.lab)
        self._made.append(self.lab)
        _ip("-n", self.lab, "link", "set", "lo", "up")
        _ip("-n", self.lab, "link", "add", self.bridge, "type", "bridge")
        _ip("-n", self.lab, "addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        _ip("-n", self.lab, "link", "set", self.bridge, "up")
        for node, netns in self.node_netns.items():
            _ip("netns", "add", netns)
            self._made.append(netns)
            outside = f"v{self.suffix}{node}"  # the bridge's end, in the lab namespace
            # Made in the lab namespace, the peer goes straight into the node's, named eth0 there.
            _ip(
                "-n", self.lab, "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", netns
            )
            _ip("-n", self.lab, "link", "set", outside, "master", self.bridge, "up")
            _ip("-n", netns, "link", "set", "lo", "up")
            _ip("-n", netns, "addr", "add", f"{self.addresses[node]}/24", "dev", "eth0")
            _ip("-n", netns, "link", "set", "eth0", "up")

    def _write_config(self) -> None:
        d = self.dir
        (d / "state").mkdir()
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={n} NodeAddr={a} CPUs={self.cpus_per_node} State=UNKNOWN"
            for n, a in self.addresses.items()
        )
        self.conf.write_text(f"""\
ClusterName=c{self.suffix}
SlurmctldHost=ctl({self.controller_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={self.run_dir}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=10
KillWait=2
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        # Beside slurm.conf, where slurmd looks for it; v1 without automount, or slurmd stops
        # with "No filesystem mounted on /sys/fs/cgroup" (ip netns exec remounts /sys).
        (d / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")

    def _start_munged(self, deadline: float) -> None:
        key = self.dir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        d = self.dir
        argv = ["munged", "--foreground", f"--socket={self.munge_socket}", f"--key-file={key}"]
        argv += [f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"]
        self._spawn("munged", self.lab, None, argv)
        while not self.munge_socket.exists():
            self._check_alive(deadline, "munged to make its socket")

    def _spawn(self, name: str, netns: str, hostname: str | None, argv: list[str]) -> None:
        """Start a daemon in the foreground in ``netns`` (with its own hostname, in a UTS namespace
        of its own: Debian's slurmd has no -N); its stdout and stderr go to <name>.out."""
        if hostname is not None:
            argv = ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *argv]
        out = self.dir / f"{name.replace(' ', '-')}.out"
        with out.open("wb") as sink:
            self.daemons[name] = subprocess.Popen(
                ["ip", "netns", "exec", netns, *argv],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )

    def _log_of(self, name: str) -> str:
        kind, _, node = name.partition(" ")
        log = self.dir / (f"slurmd-{node}.log" if node else f"{kind}.log")
        out = self.dir / f"{name.replace(' ', '-')}.out"
        return f"--- {log.name} ---\n{_tail(log)}\n--- {out.name} ---\n{_tail(out)}"

    def _check_alive(self, deadline: float, waiting_for: str) -> None:
        """Fail with the daemon's log where one has exited, or when ``deadline`` has passed."""
        for name, proc in self.daemons.items():
            if proc.poll() is not None:
                raise SlurmClusterError(
                    f"{name} exited with {proc.returncode} while waiting for {waiting_for}\n{self._log_of(name)}"
                )
        if time.monotonic() > deadline:
            logs = "\n".join(self._log_of(name) for name in self.daemons)
            raise SlurmClusterError(f"timed out waiting for {waiting_for}\n{logs}")
        time.sleep(0.1)

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo reports it (``idle``, ``alloc``, ``down*``, ...)."""
        done = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
        return dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)

    def _wait_idle(self, deadline: float) -> None:
        while set((states := self.node_states()).items()) != {(n, "idle") for n in self.node_names}:
            self._check_alive(deadline, f"every node idle in sinfo (last seen: {states or 'none'})")

    # --- use ---------------------------------------------------------------------------------

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This environment with SLURM_CONF set and no SLURM_* of an outer job (pytest may itself
        run under Slurm: its job's variables would steer srun to the wrong job)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**env, "SLURM_CONF": str(self.conf), **(extra or {})}

    def prefix(self) -> list[str]:
        """Put in front of a command to run it in the lab namespace, with SLURM_CONF set."""
        return ["ip", "netns", "exec", self.lab, "env", f"SLURM_CONF={self.conf}"]

    def run(
        self,
        cmd: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float = 120,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` in the lab namespace (srun, salloc, sbatch, squeue, scancel, scontrol),
        capturing text output; with ``check`` a failure raises with its stderr. It runs in the
        cluster's folder, unless ``cwd`` says otherwise: sbatch's slurm-<job>.out lands there."""
        kwargs.setdefault("cwd", self.dir)
        done = subprocess.run(
            ["ip", "netns", "exec", self.lab, *cmd],
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )
        if check and done.returncode:
            raise SlurmClusterError(
                f"{' '.join(cmd)} exited with {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
            )
        return done

    def popen(
        self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start ``cmd`` (a kernel, a Jupyter server) in the lab namespace, where srun works;
        ``stop()`` ends it with the daemons, as it ends everything in the cluster's namespaces."""
        kwargs.setdefault("cwd", self.dir)
        proc = subprocess.Popen(["ip", "netns", "exec", self.lab, *cmd], env=self.env(env), **kwargs)
        self._clients.append(proc)
        return proc

    # --- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """End every process in the cluster's namespaces (daemons, job steps, kernels), delete
        the namespaces (their interfaces go with them) and the cluster's folder. Safe to call
        after a half-made start, and twice."""
        try:
            self._killed |= _kill_netns(self._made)
            for proc in [*self.daemons.values(), *self._clients]:
                if proc.poll() is None:  # not in a namespace any more? it is still ours
                    proc.kill()
                proc.wait(timeout=10)  # no zombie of ours
        finally:
            for netns in reversed(self._made):
                _ip("netns", "delete", netns, check=False)
            self._made.clear()
            shutil.rmtree(self.dir, ignore_errors=True)
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def kill_node(self, node: str) -> None:
        """``node``'s slurmd, slurmstepd and tasks die at once (SIGKILL), its network kept."""
        self._killed |= _kill_netns([self.node_netns[node]])

    def pids(self) -> list[int]:
        """Every process in the cluster's namespaces: daemons, slurmstepd, job steps, kernels."""
        return [pid for netns in self._made for pid in _netns_pids(netns)]

    def leftovers(self) -> list[str]:
        """What of this cluster still exists (namespaces, processes, files): empty after stop()."""
        found = [f"netns {n}" for n in _own_namespaces() if n.startswith(self.prefix_name)]
        found += [f"pid {pid} (was in the cluster)" for pid in sorted(self._killed) if alive(pid)]
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(self.dir) in cmdline:
                found.append(f"pid {pid}: {cmdline.strip()}")
        return found + [f"folder {d}" for d in (self.dir, self.run_dir) if d.exists()]
