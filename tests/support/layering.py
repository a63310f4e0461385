"""The package's import rules (docs/contributing.md, "Layout") and the check that reads them off the source.

The check reads every module's import statements with ``ast`` and never runs the code, so a
tree that would fail to import (or needs a GPU) is checked all the same. Imports inside
functions count (they run when the function does), ``from x import y`` counts as importing
``x.y`` where that may be a module, relative imports are resolved, and ``if TYPE_CHECKING:``
blocks are skipped (they never run). A layer's rule follows imports through the package: a
module breaks it by importing, in any number of steps, a module that imports what the layer
may not. Importing a module runs its parent packages' ``__init__`` too, but only their
import-time statements: a package's lazy hooks (``load_ipython_extension``) run only when
called. The one-client rule is about a module's own imports: using the client is the point.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "jupyter_gpu"
IPYTHON = ("IPython", "ipykernel", "ipywidgets")  # ipykernel and ipywidgets import IPython
HTTP_CLIENTS = (
    "urllib.request",
    "http.client",
    "tornado.httpclient",
    "tornado.simple_httpclient",
    "tornado.curl_httpclient",
    "tornado.websocket",
    "requests",
    "httpx",
    "aiohttp",
    "urllib3",
    "pycurl",
)
# What reads or writes anything outside the process's memory: files, processes, the network,
# the machine's own state, logs.
IO = (
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "fcntl",
    "mmap",
    "sqlite3",
    "subprocess",
    "multiprocessing",
    "concurrent",
    "socket",
    "ssl",
    "select",
    "selectors",
    "asyncio",
    "psutil",
    "logging",
    *HTTP_CLIENTS,
)
THE_CLIENT = f"{PACKAGE}.client"


@dataclass(frozen=True)
class Rule:
    """``layer``'s modules never import any of ``forbidden``."""

    name: str
    layer: str
    forbidden: tuple[str, ...]
    why: str
    transitive: bool = True  # through the package's own modules, or the module's own imports only
    exempt: tuple[str, ...] = ()


RULES = (
    Rule(
        "analysis-is-pure",
        f"{PACKAGE}.analysis",
        ("torch", "pynvml", "tornado", "jupyter_server", *IPYTHON, *IO),
        "pure functions over readings: no device, no framework, no I/O",
    ),
    Rule("nvml-without-torch", f"{PACKAGE}.nvml", ("torch",), "reads NVML where torch is not installed"),
    Rule(
        "server-without-kernel",
        f"{PACKAGE}.server",
        (f"{PACKAGE}.kernel", "torch", *IPYTHON),
        "start-up stays fast; a server has no IPython",
    ),
    Rule(
        "kernel-without-server", f"{PACKAGE}.kernel", (f"{PACKAGE}.server",), "kernels run without a server"
    ),
    Rule(
        "cli-without-ipython", f"{PACKAGE}.cli", IPYTHON, "a base install has no IPython (the kernel extra)"
    ),
    Rule(
        "hub-without-kernel",
        f"{PACKAGE}.hub",
        (f"{PACKAGE}.kernel", "torch", *IPYTHON),
        "the Hub service runs next to the Hub, not in a kernel",
    ),
    Rule(
        "ddp-without-kernel",
        f"{PACKAGE}.ddp",
        (f"{PACKAGE}.kernel", *IPYTHON),
        "the ranks, the launcher, preflight and Slurm run without IPython",
    ),
    Rule(
        "one-http-client",
        PACKAGE,
        HTTP_CLIENTS,
        f"every request goes through {THE_CLIENT} (no proxy, bounded reads, tokens)",
        transitive=False,
        exempt=(THE_CLIENT,),
    ),
)
DYNAMIC = "dynamic-import"
# The only modules that may import by name at run time (importlib.import_module, __import__),
# each with why.
DYNAMIC_IMPORTS = {f"{PACKAGE}.kernel.extension": "load() registers each of FEATURES by its module's name"}


@dataclass
class Module:
    name: str
    is_package: bool
    eager: set[str] = field(default_factory=set)  # imported when the module is
    lazy: set[str] = field(default_factory=set)  # imported when one of its functions runs
    dynamic: list[tuple[str, int]] = field(default_factory=list)  # imports by name at run time, and line


@dataclass(frozen=True)
class Violation:
    rule: str
    module: str
    found: str  # the import that breaks the rule
    chain: tuple[str, ...]  # module -> ... -> found

    def __str__(self) -> str:
        return f"{self.rule}: {' -> '.join(self.chain)}"


def within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """Fills a module's imports from its syntax tree."""

    def __init__(self, module: Module, known: set[str]) -> None:
        self.module, self.known, self.depth = module, known, 0
        self.import_module = {"import_module", "__import__"}  # names that import by name

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        for child in node.orelse if _is_type_checking(node.test) else [node.test, *node.body, *node.orelse]:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        self._add(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            package = self.module.name.split(".")[: None if self.module.is_package else -1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        if base == "importlib":
            self.import_module.update(a.asname or a.name for a in node.names if a.name == "import_module")
        names = [f"{base}.{a.name}" for a in node.names]
        if within(base, (PACKAGE,)):  # ours: `from package import submodule` imports the submodule
            self._add([n for n in names if n in self.known] or [base])
        else:  # theirs: any name may be a submodule (`from urllib import request`)
            self._add([base, *names])

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = (
            func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        )
        if called in self.import_module:
            self.module.dynamic.append((ast.unparse(node), node.lineno))
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Constant) and isinstance(target.value, str) and target.value[:1] != ".":
                self._add([target.value])  # a name we can read is followed like any import
        self.generic_visit(node)

    def _add(self, names: Iterable[str]) -> None:
        (self.module.lazy if self.depth else self.module.eager).update(names)


def read_modules(root: Path) -> dict[str, Module]:
    """Every module of the package under ``root`` (a checkout) with what it imports."""
    paths = [p for p in (root / PACKAGE).rglob("*.py") if "labextension" not in p.parts]
    read = [(path, _module(root, path)) for path in paths]
    modules = {module.name: module for _, module in read}
    for path, module in read:
        _Imports(module, set(modules)).visit(_parse(path.read_text(), str(path.relative_to(root))))
    return modules


@functools.cache
def _parse(source: str, filename: str) -> ast.Module:
    """Parsed once: a planted copy of the package shares all but one file with the real one."""
    return ast.parse(source, filename)


def _module(root: Path, path: Path) -> Module:
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return Module(".".join(parts[:-1] if is_package else parts), is_package)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(
    modules: dict[str, Module], start: str, stop: tuple[str, ...] = ()
) -> dict[str, tuple[str, ...]]:
    """Every module ``start`` may end up importing, each with one chain of imports to it; what
    modules in ``stop`` import is not followed."""
    chains: dict[str, tuple[str, ...]] = {start: (start,)}
    expanded: dict[str, bool] = {}  # module -> whether its lazy imports were followed too
    queue = [(start, True)]
    while queue:
        name, whole = queue.pop()
        if expanded.get(name) in (True, whole) or name not in modules:
            continue
        expanded[name] = whole
        module = modules[name]
        steps = [(t, True) for t in sorted(module.eager | (module.lazy if whole else set()))]
        steps += [(p, False) for p in _parents(name)]
        for target, target_whole in steps:
            chains.setdefault(target, (*chains[name], target))
            if not within(target, stop):
                queue.append((target, target_whole))
    return chains


def _breaks(modules: dict[str, Module], rule: Rule, name: str) -> list[Violation]:
    """How ``name`` breaks ``rule``: up to the first forbidden module of each chain, and only
    where no other module of the layer stands between (that one is blamed itself)."""
    if rule.transitive:
        reached = imports_of(modules, name, rule.forbidden)
    else:
        module = modules[name]
        reached = {t: (name, t) for t in sorted(module.eager | module.lazy)}
    return [
        Violation(rule.name, name, t, chain)
        for t, chain in reached.items()
        if within(t, rule.forbidden) and not any(within(m, (rule.layer,)) for m in chain[1:-1])
    ]


def check(root: Path) -> list[Violation]:
    """Every way the package under ``root`` breaks a rule; none for a tree that keeps them all."""
    modules = read_modules(root)
    found = [
        violation
        for rule in RULES
        for name in sorted(modules)
        if within(name, (rule.layer,)) and not within(name, rule.exempt)
        for violation in _breaks(modules, rule, name)
    ]
    for name, module in sorted(modules.items()):
        if name not in DYNAMIC_IMPORTS:
            found += [
                Violation(DYNAMIC, name, call, (f"{name} (line {line})", call))
                for call, line in module.dynamic
            ]
    for name in DYNAMIC_IMPORTS:
        if name not in modules or not modules[name].dynamic:
            found.append(Violation(DYNAMIC, name, "listed but imports nothing by name", (name,)))
    return found
