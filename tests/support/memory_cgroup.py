"""A memory cgroup of the test's own (root only), v1 where its memory controller is mounted, v2
otherwise, to put a Jupyter server in a container's memory limit without a container runtime."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jupyter_gpu import container_limits


def _require(reason: str) -> None:
    """Skip, except where JUPYTER_GPU_REQUIRE_CGROUPS=1 (CI, as root): there it fails."""
    if os.environ.get("JUPYTER_GPU_REQUIRE_CGROUPS") == "1":
        pytest.fail(f"a memory cgroup is required here: {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[tuple[Path, int]]:
    """A fresh cgroup below this process's memory cgroup with ``limit_bytes`` and no swap:
    ``(its cgroup.procs, version)``. Processes written there are in it; it is removed after."""
    if os.geteuid() != 0:
        _require("making a cgroup needs root")
    found = container_limits.memory_cgroup()
    if isinstance(found, str):
        _require(found)
        raise AssertionError("unreachable")
    folder = Path(found.chain[0]) / f"jupyter-gpu-test-{secrets.token_hex(4)}"
    try:
        folder.mkdir()
    except OSError as error:
        _require(f"cannot make a cgroup in {folder.parent}: {error}")
    try:
        if found.version == 1:
            (folder / "memory.limit_in_bytes").write_text(str(limit_bytes))
            if (folder / "memory.memsw.limit_in_bytes").exists():  # memory and swap together
                (folder / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        else:
            (folder / "memory.max").write_text(str(limit_bytes))
            (folder / "memory.swap.max").write_text("0")
        yield folder / "cgroup.procs", found.version
    finally:
        deadline = time.monotonic() + 30
        while (folder / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
            time.sleep(0.1)  # the server's processes are on their way out
        folder.rmdir()


def entering(procs: Path) -> tuple[str, ...]:
    """A command prefix that moves the command into the cgroup before it starts."""
    return ("sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs))
