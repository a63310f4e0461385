"""The docs' reference pages are generated from the code (docs/_ext); here the generators are
checked against what the package registers, so a new magic, subcommand, configurable class,
Prometheus series or benchmark result cannot be left out of the docs. .ci/run builds the site
itself (warnings are errors, internal links checked)."""

from __future__ import annotations

import ast
import re
import sys

from support.ipython_shell import shared_shell
from support.jupyter_api import get
from support.paths import ROOT
from support.prometheus_text import series as scraped_series
from support.waiting import wait_for

from jupyter_gpu.cli import parser as cli_parser
from jupyter_gpu.kernel import extension

DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))  # the docs' Sphinx extension, as docs/conf.py loads it

from jupyter_gpu_docs.cli import command_parsers  # noqa: E402
from jupyter_gpu_docs.config import configurable, options  # noqa: E402
from jupyter_gpu_docs.magics import magic_docs  # noqa: E402
from jupyter_gpu_docs.metrics import series  # noqa: E402


def page(name: str) -> str:
    return (DOCS / name).read_text()


def test_every_magic_the_extension_registers_is_documented_with_its_kinds() -> None:
    shell = shared_shell()
    before = {(kind, name) for kind, table in shell.magics_manager.magics.items() for name in table}
    extension.load(shell)
    try:
        after = {(kind, name) for kind, table in shell.magics_manager.magics.items() for name in table}
    finally:
        extension.unload(shell)
    registered = after - before
    documented = {(kind, m.name) for m in magic_docs() for kind in m.kinds}
    assert registered and documented == registered
    assert "```{jupyter-gpu-magics}" in page("reference/magics.md")


def test_every_subcommand_jupyter_gpu_lists_is_documented() -> None:
    listed = re.search(r"\{([a-z,]+)\}", cli_parser().format_usage())
    assert listed is not None
    documented = command_parsers("jupyter_gpu.cli:parser")
    assert {f"jupyter gpu {name}" for name in listed.group(1).split(",")} | {"jupyter gpu"} == set(documented)
    text = page("reference/cli.md")
    assert "```{jupyter-gpu-command} jupyter_gpu.cli:parser" in text
    assert "```{jupyter-gpu-command} jupyter_gpu.hub.app:parser" in text
    assert (
        "--cull-idle-servers"
        in command_parsers("jupyter_gpu.hub.app:parser")["python -m jupyter_gpu.hub"].format_help()
    )


CONFIGURABLE_BASES = {
    "Configurable",
    "LoggingConfigurable",
    "SingletonConfigurable",
    "ExtensionApp",
    "Application",
}


def test_every_configurable_class_of_the_package_has_its_options_documented() -> None:
    found = set()
    for path in (ROOT / "jupyter_gpu").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                getattr(base, "id", getattr(base, "attr", None)) in CONFIGURABLE_BASES for base in node.bases
            ):
                found.add(f"{module}.{node.name}")
    documented = set(re.findall(r"```\{jupyter-gpu-config\} (\S+)", page("reference/configuration.md")))
    assert found and documented == found
    names = {option.name for path in documented for option in options(configurable(path))}
    assert {"GPUMonitor.interval", "GPUMonitor.kernel_memory_limit", "KernelAgent.interval"} <= names
    assert not any(name.endswith((".answer_yes", ".log_level")) for name in names)  # not inherited ones


async def test_every_series_a_server_exports_is_documented(jp_fetch) -> None:
    async def with_slow_fields():
        body = await get(jp_fetch, "telemetry")
        return (
            body if body["latest"] and body["latest"]["gpus"][0].get("memory_temperature_celsius") else None
        )

    await wait_for(with_slow_fields)
    await get(jp_fetch, "kernels")
    text = (await jp_fetch("metrics")).body.decode()
    exported = {
        line.split("{")[0].split(" ")[0] for line in scraped_series(text) if line.startswith("jupyter_gpu_")
    }
    documented = {s.name for s in series()}
    assert exported and exported <= documented, exported - documented
    assert "```{jupyter-gpu-metrics}" in page("guide/prometheus.md")


def test_every_benchmark_result_is_on_the_performance_page() -> None:
    text = page("performance.md")
    results = sorted((ROOT / "benchmarks" / "results").iterdir())
    assert results
    missing = [p.name for p in results if f"benchmarks/results/{p.name}" not in text]
    assert not missing


def test_pictures_are_relative_paths_to_files_in_the_checkout() -> None:
    """They show offline and in a clone, not only on the project's web page."""
    pages = [ROOT / "README.md", *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
    pictures = {doc: re.findall(r"!\[.*?\]\(([^)\s]+)\)", doc.read_text()) for doc in pages}
    assert pictures[ROOT / "README.md"]
    for doc, targets in pictures.items():
        for target in targets:
            assert not re.match(r"[a-z]+:", target), (doc, target)
            assert (doc.parent / target).resolve().is_file(), (doc, target)
