"""Another local user watching a DDP session: it must read nothing of it, nor choke it.

The attacker runs as a second uid (``tests/support/other_user.py``) with the program in
``tests/support/snoop.py``: while the owner pushes a token, runs a cell, returns a value and
saves a checkpoint, it connects to every loopback listener as a torch store client, lists and
reads every key, connects to every Unix socket it can see (200 times each under the temporary
directory), and reads every file it may there. A control proves the watcher reads what is
reachable: a store and a file the test exposes on purpose, holding a canary of their own.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import textwrap
import threading
from datetime import timedelta
from pathlib import Path

from support.ddp_kernel import Kernel, no_ranks_left
from support.other_user import run_as_attacker
from support.processes import listeners

SNOOP = Path(__file__).parent / "support" / "snoop.py"


def test_another_user_reads_nothing_of_a_session_and_cannot_choke_it(tmp_path: Path) -> None:
    import torch.distributed as dist

    canary = {
        what: f"CANARY-{what}-{secrets.token_hex(6)}"
        for what in ("push", "source", "return", "path", "control")
    }
    shared = tempfile.mkdtemp(prefix="jgpu-shared-")  # a world-readable place, like /tmp itself
    os.chmod(shared, 0o1777)
    stop, watched = os.path.join(shared, "stop"), os.path.join(shared, "watched")
    targets = Path(shared, "targets")
    exposed = Path(shared, "exposed.txt")  # the control: readable by anyone
    exposed.write_text(canary["control"])
    exposed.chmod(0o644)
    control_store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
    )
    control_store.set("control", canary["control"])

    kernel = Kernel()
    done = threading.Event()

    def point_out_listeners() -> None:
        """Every listening port of the kernel's processes and the control store, kept current."""
        while not done.wait(0.2):
            ports = {port for _, port in listeners(kernel.pid)} | {control_store.port}
            targets.write_text("\n".join(map(str, sorted(ports))))
            targets.chmod(0o644)

    pointer = threading.Thread(target=point_out_listeners, daemon=True)
    pointer.start()
    watcher: dict[str, subprocess.CompletedProcess[str]] = {}
    thread = threading.Thread(
        target=lambda: watcher.update(
            run=run_as_attacker(
                SNOOP.read_text(), timeout=120, args=(stop, watched, str(targets), tempfile.gettempdir())
            )
        )
    )
    try:
        assert kernel.run(f"hf_token = {canary['push']!r}").error is None
        assert kernel.run("%ddp_start -n 2").error is None
        thread.start()
        # The cell holds its values (the pushed token, its own source) until the watcher has
        # had three rounds at them.
        cell = kernel.run(
            textwrap.dedent(f"""\
            %%ddp --push hf_token --return y
            import os, time
            secret_in_source = {canary["source"]!r}
            y = {canary["return"]!r} + str(RANK) + hf_token[:0]
            deadline = time.monotonic() + 60
            while not os.path.exists({watched!r}) and time.monotonic() < deadline:
                time.sleep(0.05)
            """),
            timeout=120,
        )
        assert cell.error is None, cell.traceback
        assert kernel.run("print(sorted(_ddp.values()))").stdout.strip() == str(
            [canary["return"] + "0", canary["return"] + "1"]
        )
        # checkpoint paths travel the same channel
        path = tmp_path / canary["path"]
        assert kernel.run("%%ddp\nmodel = torch.nn.Linear(2, 2)").error is None
        assert kernel.run(f"%ddp_save model {path}").error is None
    finally:
        Path(stop).touch()
        thread.join(150)
        done.set()
        pointer.join(5)
        shutil.rmtree(shared, ignore_errors=True)
        kernel.run("%ddp_stop")
        stopped = no_ranks_left(kernel.pid)
        kernel.close()
    assert stopped
    result = watcher["run"]
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["uid"] != os.getuid() and report["rounds"] >= 1
    seen = "".join(bytes.fromhex(v).decode("latin-1") for v in report["found"].values())
    assert canary["control"] in seen  # the watcher does read what is reachable
    for what in ("push", "source", "return", "path"):
        assert canary[what] not in seen, (
            what,
            [k for k, v in report["found"].items() if canary[what] in bytes.fromhex(v).decode("latin-1")],
        )
    # It saw the session's socket (any user can list it) and could not connect to it.
    sockets = {
        k: v for k, v in report["reached"].items() if k.startswith("unix:") and "jupyter_gpu_ddp_" in k
    }
    assert sockets and all(v.startswith("refused") for v in sockets.values()), report["reached"]
