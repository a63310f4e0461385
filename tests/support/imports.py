"""What importing costs: which heavy modules a fresh interpreter has loaded after some code ran."""

from __future__ import annotations

import json
import subprocess
import sys

from support.paths import ROOT


def modules_after(code: str, watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has imported after running ``code`` (from the
    repository root, so that it sees this checkout)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])
