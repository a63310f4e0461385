"""The tests' own layout rule and the check that reads it off their source (with ``ast``; nothing
is imported or run): what test modules share lives in the package ``support`` (tests/support/),
so that no test module imports another test module, ``conftest``, or a loose helper module.

Beside tests/support/, tests/ and its folders hold only test modules (``test_*.py``) and
``conftest.py``. Every import statement counts, those inside functions too, and so do
``importlib.import_module`` and ``__import__`` calls with a name written out. A fixture is never
imported (pytest finds it in a plugin listed in tests/conftest.py, or in a conftest.py): an
import of a name that a support module defines as a fixture breaks the rule too. Every module
under tests/ (test modules, ``conftest.py`` and ``support`` alike; recorded data aside) stays under
``MAX_LINES`` lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SUPPORT = "support"
DATA = ("fixtures",)  # folders of recorded data, not code
MAX_LINES = 400


@dataclass(frozen=True)
class Breach:
    path: str  # relative to tests/
    line: int
    what: str

    def __str__(self) -> str:
        return f"tests/{self.path}:{self.line}: {self.what}"


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in ("pytest.fixture", "fixture")


def fixtures_of(source: str) -> set[str]:
    """The names a module defines as pytest fixtures."""
    return {
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(map(_is_fixture, node.decorator_list))
    }


def _imported(tree: ast.Module) -> list[tuple[int, str, list[str]]]:
    """Each absolute import: its line, the module, and the names taken from it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "importlib.import_module",
            "__import__",
        ):
            name = node.args[0] if node.args else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.append((node.lineno, name.value, []))
    return found


def breaches_in(source: str, path: str, loose: set[str], fixtures: dict[str, set[str]]) -> list[Breach]:
    """How the module at ``path`` (under tests/) breaks the rule: ``loose`` are the names of
    helper modules outside ``support``, ``fixtures`` the fixtures of each support module."""
    found = []
    for line, module, names in _imported(ast.parse(source, path)):
        top = module.split(".")[0]
        if top.startswith("test_") or top == "conftest":
            found.append(
                Breach(path, line, f"imports the test module {module}: move what it shares to support/")
            )
        elif top in loose:
            found.append(
                Breach(path, line, f"imports the helper module {module}, which lives outside support/")
            )
        elif top == SUPPORT:
            taken = [
                n for n in names if n in fixtures.get(module.removeprefix(SUPPORT).removeprefix("."), set())
            ]
            if taken:
                found.append(
                    Breach(
                        path, line, f"imports the fixture {', '.join(taken)}: list its plugin in conftest.py"
                    )
                )
    return found


def _dotted(path: str) -> str:
    """support/x/y.py -> x.y, support/__init__.py -> '': the module's name within ``support``."""
    parts = Path(path).with_suffix("").parts[1:]
    return ".".join(parts[:-1] if parts[-1:] == ("__init__",) else parts)


def check(tests: Path) -> list[Breach]:
    """Every breach of the rule under ``tests`` (the tests folder); none where it holds."""
    sources = {
        path.relative_to(tests).as_posix(): path.read_text()
        for path in sorted(tests.rglob("*.py"))
        if not set(path.relative_to(tests).parts[:-1]) & set(DATA) and "__pycache__" not in path.parts
    }
    support = {p: s for p, s in sources.items() if p.split("/")[0] == SUPPORT}
    fixtures = {_dotted(p): fixtures_of(s) for p, s in support.items()}
    found = []
    loose = set()
    for path in sources.keys() - support.keys():
        name = path.rsplit("/", 1)[-1]
        if not (name.startswith("test_") or name == "conftest.py"):
            loose.add(name.removesuffix(".py"))
            found.append(
                Breach(path, 1, "is neither a test module nor conftest.py: helpers belong in support/")
            )
    for path, source in sources.items():
        if (lines := source.count("\n")) >= MAX_LINES:
            found.append(
                Breach(path, MAX_LINES, f"has {lines} lines: split it by job (at most {MAX_LINES - 1})")
            )
    for path, source in sources.items():
        found += breaches_in(source, path, loose, fixtures)
    return sorted(found, key=lambda b: (b.path, b.line, b.what))
