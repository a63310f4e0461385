"""The import rules of the docs' "Layout" (docs/contributing.md) hold for the package, and the
check behind them catches each kind of break: every rule is planted, one at a time, in a copy of the package."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from support.layering import DYNAMIC, DYNAMIC_IMPORTS, IPYTHON, PACKAGE, RULES, Violation, check, within
from support.paths import ROOT


@pytest.fixture(scope="module")
def violations() -> list[Violation]:
    return check(ROOT)


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_the_package_keeps_the_rule(rule, violations):
    broken = [str(v) for v in violations if v.rule == rule.name]
    assert not broken, "\n".join(
        [f"{rule.layer} never imports {', '.join(rule.forbidden)}: {rule.why}", *broken]
    )


def test_only_the_listed_modules_import_by_name(violations):
    broken = [str(v) for v in violations if v.rule == DYNAMIC]
    assert not broken, "\n".join([f"list them in DYNAMIC_IMPORTS, with why: {DYNAMIC_IMPORTS}", *broken])


class Plant(NamedTuple):
    rule: str
    path: str  # a new module, under jupyter_gpu/
    code: str
    found: str  # what the check must name as the import that breaks the rule


PLANTED = [
    Plant("analysis-is-pure", "analysis/planted.py", "def f():\n    import torch.cuda\n", "torch"),
    Plant("analysis-is-pure", "analysis/planted.py", "import pynvml\n", "pynvml"),
    Plant("analysis-is-pure", "analysis/planted.py", "from tornado import ioloop\n", "tornado"),
    Plant("analysis-is-pure", "analysis/planted.py", "from pathlib import Path\n", "pathlib"),
    Plant("analysis-is-pure", "analysis/planted.py", "import subprocess\n", "subprocess"),
    Plant("analysis-is-pure", "analysis/planted.py", "import socket\n", "socket"),
    Plant("analysis-is-pure", "analysis/planted.py", "from urllib import request\n", "urllib.request"),
    Plant("analysis-is-pure", "analysis/planted.py", "from .. import runtime_dir\n", "os"),  # through ours
    Plant("nvml-without-torch", "nvml/planted.py", "from torch import cuda\n", "torch"),
    Plant("nvml-without-torch", "nvml/planted.py", "__import__('torch')\n", "torch"),
    Plant("server-without-kernel", "server/planted.py", "from IPython.display import HTML\n", "IPython"),
    Plant("server-without-kernel", "server/planted.py", "def f():\n    import torch\n", "torch"),
    Plant(
        "server-without-kernel", "server/planted.py", "from ..kernel import timeline\n", "jupyter_gpu.kernel"
    ),
    Plant(
        "kernel-without-server", "kernel/planted.py", "from ..server import kernels\n", "jupyter_gpu.server"
    ),
    Plant("cli-without-ipython", "cli/planted.py", "import IPython\n", "IPython"),
    Plant("cli-without-ipython", "cli/planted.py", "def f():\n    import ipywidgets\n", "ipywidgets"),
    Plant("hub-without-kernel", "hub/planted.py", "import ipykernel\n", "ipykernel"),
    Plant("hub-without-kernel", "hub/planted.py", "import torch.distributed\n", "torch"),
    Plant("ddp-without-kernel", "ddp/planted.py", "from IPython.core.magic import Magics\n", "IPython"),
    Plant("ddp-without-kernel", "ddp/planted.py", "from ..kernel.timeline import f\n", "jupyter_gpu.kernel"),
    Plant("one-http-client", "cli/planted.py", "import urllib.request\n", "urllib.request"),
    Plant("one-http-client", "doctor/planted.py", "from http import client\n", "http.client"),
    Plant("one-http-client", "hub/planted.py", "from tornado import httpclient\n", "tornado.httpclient"),
    Plant(
        "one-http-client",
        "server/planted.py",
        "def f():\n    from urllib.request import urlopen\n",
        "urllib.request",
    ),
    Plant(
        DYNAMIC,
        "nvml/planted.py",
        "import importlib\n\ndef f(name):\n    importlib.import_module(name)\n",
        "importlib.import_module(name)",
    ),
    Plant(DYNAMIC, "analysis/planted.py", "import_json = lambda: __import__('json')\n", "__import__('json')"),
    Plant(
        DYNAMIC,
        "cli/planted.py",
        "from importlib import import_module as load\n\nload('json')\n",
        "load('json')",
    ),
]
NOT_BLAMED = [
    Plant(
        "", "nvml/planted.py", "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import torch\n", ""
    ),
    Plant("", "cli/planted.py", "from ..client import Server\n", ""),  # the one client is for use
    Plant("", "cli/planted.py", "from urllib.parse import quote\n", ""),  # parses, asks nothing
    Plant("", "server/planted.py", "LIMIT = 1\n", ""),  # its parents' lazy hooks (IPython's) do not count
]


def _copy_of_the_package(tmp_path: Path) -> Path:
    def not_python(folder: str, names: list[str]) -> set[str]:
        return {
            n for n in names if n in ("__pycache__", "labextension") or "." in n and not n.endswith(".py")
        }

    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=not_python)
    return tmp_path


def _plant(root: Path, plant: Plant) -> str:
    """Write the planted module into the copy at ``root``; its module name."""
    path = root / PACKAGE / plant.path
    (path.parent / "__init__.py").touch()  # a layer that does not exist yet gets its package
    path.write_text(plant.code)
    return f"{PACKAGE}.{plant.path.removesuffix('.py').replace('/', '.')}"


def test_every_rule_has_a_planted_break():
    assert {p.rule for p in PLANTED} == {rule.name for rule in RULES} | {DYNAMIC}


@pytest.mark.parametrize(
    "plant", PLANTED, ids=[f"{p.rule}:{p.code.splitlines()[-1].strip()}" for p in PLANTED]
)
def test_a_planted_break_is_reported(plant, tmp_path):
    root = _copy_of_the_package(tmp_path)
    name = _plant(root, plant)
    reported = [v for v in check(root) if v.module == name]
    assert any(v.rule == plant.rule and within(v.found, (plant.found,)) for v in reported), reported


@pytest.mark.parametrize("plant", NOT_BLAMED, ids=[p.code.splitlines()[-1].strip() for p in NOT_BLAMED])
def test_what_keeps_the_rules_is_not_blamed(plant, tmp_path):
    root = _copy_of_the_package(tmp_path)
    name = _plant(root, plant)
    assert [str(v) for v in check(root) if v.module == name] == []


def test_a_listed_dynamic_import_that_went_is_reported(tmp_path):
    root = _copy_of_the_package(tmp_path)
    (root / PACKAGE / "kernel" / "extension.py").write_text("def load(ipython):\n    pass\n")
    assert any(
        v.rule == DYNAMIC and v.module == f"{PACKAGE}.kernel.extension" and "listed" in v.found
        for v in check(root)
    )


def _without_ipython(code: str, *argv: str) -> subprocess.CompletedProcess:
    """Run ``code`` where IPython and its kin cannot be imported at all, as on a base install."""
    block = f"import sys; sys.modules.update(dict.fromkeys({IPYTHON!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", block + code, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_the_command_line_works_without_ipython():
    # warmup's --devices went through the IPython magic's module (what failed on GPU machines)
    done = _without_ipython(
        "from jupyter_gpu.cli.warmup import devices_option; print(devices_option('1,0', 2))"
    )
    assert done.stdout.strip() == "[1, 0]", done.stderr
    run = "from jupyter_gpu.cli import main; raise SystemExit(main(sys.argv[1:]))"
    done = _without_ipython(run, "warmup", "--devices", "none")  # no GPU: 3; else a usage error, 2
    assert done.returncode in (2, 3) and "Traceback" not in done.stderr, done.stderr
    for argv in (["doctor", "--no-server", "--json"], ["status", "--no-server", "--json"]):
        done = _without_ipython(run, *argv)
        assert json.loads(done.stdout), f"jupyter gpu {' '.join(argv)}: {done.stderr}"
