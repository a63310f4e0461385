"""The tests keep their own layout rule (tests/support/layout.py): what they share is in the
package ``support``, no test module imports another test module, ``conftest`` or a loose helper
module, no fixture is imported, and no module under tests/ reaches the line limit. The check
catches each kind of break, planted in a source string or in a copy of a tests folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.layout import MAX_LINES, Breach, breaches_in, check
from support.paths import TESTS

FIXTURES_OF = {"simulated_gpu": {"children", "nvml"}}  # as a support module would define them


def test_the_tests_keep_the_rule() -> None:
    breaches = check(TESTS)
    assert not breaches, "\n".join(map(str, breaches))


@pytest.mark.parametrize(
    ("source", "line", "words"),
    [
        ("from test_cli import cli\n", 1, "imports the test module test_cli"),
        ("import conftest\n", 1, "imports the test module conftest"),
        ("from conftest import ROOT\n", 1, "imports the test module conftest"),
        ("import os\n\n\ndef f():\n    from test_ddp_fsdp import MODEL\n", 5, "test module test_ddp_fsdp"),
        ("import test_server_api as api\n", 1, "imports the test module test_server_api"),
        ("import importlib\nimportlib.import_module('test_metrics')\n", 2, "test module test_metrics"),
        ("__import__('conftest')\n", 1, "imports the test module conftest"),
        ("from kernel_client import run\n", 1, "helper module kernel_client, which lives outside support/"),
        ("import kernel_client.sub\n", 1, "helper module kernel_client.sub"),
        ("from support.simulated_gpu import kernel_on_gpu, nvml\n", 1, "imports the fixture nvml"),
    ],
)
def test_a_planted_import_is_named_with_its_file_and_line(source: str, line: int, words: str) -> None:
    [breach] = breaches_in(source, "browser/test_planted.py", {"kernel_client"}, FIXTURES_OF)
    assert (breach.path, breach.line) == ("browser/test_planted.py", line)
    assert words in breach.what
    assert str(breach).startswith(f"tests/browser/test_planted.py:{line}: ")


@pytest.mark.parametrize(
    "source",
    [
        "from support.kernel_client import run\n",
        "from support import fake_torch\n",
        "import support.simulated_gpu\n",
        "from support.simulated_gpu import kernel_on_gpu\n",
        "CELL = 'import _fake_torch'\n",  # text run elsewhere, not an import of this module
        "from jupyter_gpu import client\nimport pytest\n",
    ],
)
def test_imports_of_support_and_of_anything_else_pass(source: str) -> None:
    assert breaches_in(source, "test_planted.py", {"kernel_client"}, FIXTURES_OF) == []


def test_a_loose_helper_and_its_importers_are_named_in_a_copy(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "support").mkdir(parents=True)
    (tests / "browser").mkdir()
    (tests / "fixtures").mkdir()
    (tests / "support" / "__init__.py").write_text("")
    (tests / "support" / "plugin.py").write_text(
        "import pytest\n\n\n@pytest.fixture()\ndef thing():\n    return 1\n"
    )
    (tests / "support" / "big.py").write_text("x = 1\n" * MAX_LINES)
    (tests / "conftest.py").write_text('pytest_plugins = ["support.plugin"]\n')
    (tests / "fixtures" / "recorded.py").write_text("import test_anything\n")  # data: not read
    (tests / "browser" / "helper.py").write_text("X = 1\n")
    (tests / "browser" / "test_a.py").write_text("import os\nfrom helper import X\n")
    (tests / "test_b.py").write_text("from support.plugin import thing  # noqa: F401\n")
    assert check(tests) == [
        Breach(
            "browser/helper.py", 1, "is neither a test module nor conftest.py: helpers belong in support/"
        ),
        Breach("browser/test_a.py", 2, "imports the helper module helper, which lives outside support/"),
        Breach(
            "support/big.py", MAX_LINES, f"has {MAX_LINES} lines: split it by job (at most {MAX_LINES - 1})"
        ),
        Breach("test_b.py", 1, "imports the fixture thing: list its plugin in conftest.py"),
    ]


def test_a_long_module_anywhere_in_tests_is_named_in_a_copy(tmp_path: Path) -> None:
    """The line limit holds for test modules and conftest.py as for support; recorded data aside."""
    tests = tmp_path / "tests"
    for folder in ("support", "browser", "fixtures"):
        (tests / folder).mkdir(parents=True)
    (tests / "support" / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("x = 1\n" * MAX_LINES)
    (tests / "browser" / "test_long.py").write_text("x = 1\n" * (MAX_LINES + 50))
    (tests / "test_short.py").write_text("x = 1\n" * (MAX_LINES - 1))
    (tests / "fixtures" / "recorded.py").write_text("x = 1\n" * 2 * MAX_LINES)  # data: not read
    split = f"split it by job (at most {MAX_LINES - 1})"
    assert check(tests) == [
        Breach("browser/test_long.py", MAX_LINES, f"has {MAX_LINES + 50} lines: {split}"),
        Breach("conftest.py", MAX_LINES, f"has {MAX_LINES} lines: {split}"),
    ]
