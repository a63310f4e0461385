"""The hostile neighbour of the shared-machine tests: Python run as another local user.

Where file and socket permissions are the defence, an attack run as root proves nothing, so
it runs under a uid the test creates, with the system Python (the same minor version as the
test's interpreter, so torch's extension modules load) and the test interpreter's packages on
``PYTHONPATH``. Those live under /root, which that user cannot enter: they are bind-mounted
read-only at a readable place in a private mount namespace (``unshare -m``), so nothing on the
machine changes for anyone else.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

ATTACKER = "jgpu-intruder"
SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]


def _unavailable(why: str) -> None:
    if os.environ.get("JUPYTER_GPU_REQUIRE_OTHER_USER"):
        pytest.fail(f"the second-uid tests must run here: {why}")
    pytest.skip(why)


def attacker_uid() -> int:
    """The attacker's uid, creating the user on first use (root only)."""
    if os.geteuid() != 0:
        _unavailable("creating a second user needs root")
    for tool in ("useradd", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is missing")
    try:
        return pwd.getpwnam(ATTACKER).pw_uid
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ATTACKER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(ATTACKER).pw_uid


def run_as_attacker(
    code: str, timeout: float = 60.0, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as the attacker; returns the finished process (stdout, stderr, returncode)."""
    uid = attacker_uid()
    gid = pwd.getpwnam(ATTACKER).pw_gid
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if probe.returncode != 0 or probe.stdout.strip() != str(tuple(sys.version_info[:2])):
        _unavailable(f"{SYSTEM_PYTHON} is not Python {sys.version_info[0]}.{sys.version_info[1]}")
    site_dirs = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    with tempfile.TemporaryDirectory(prefix="jgpu-attacker-") as tmp:
        os.chmod(tmp, 0o755)
        mounts, path = [], []
        for i, site in enumerate(site_dirs):
            point = os.path.join(tmp, f"site{i}")
            os.mkdir(point)
            mounts.append(f"mount --bind -o ro {site} {point}")
            path.append(point)
        script = os.path.join(tmp, "attack.py")
        Path(script).write_text(code)
        os.chmod(script, 0o644)
        shell = " && ".join(
            [
                *mounts,
                f'exec setpriv --reuid={uid} --regid={gid} --clear-groups {SYSTEM_PYTHON} {script} "$@"',
            ]
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": tmp,
            "PYTHONPATH": os.pathsep.join([str(REPO), *path]),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", shell, "attack", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=tmp,
        )
