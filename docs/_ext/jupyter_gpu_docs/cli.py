"""The command lines, read from their argparse parsers: ``jupyter gpu`` and its subcommands
(``jupyter_gpu.cli.parser``) and the JupyterHub service (``jupyter_gpu.hub.app.parser``)."""

from __future__ import annotations

import argparse
import importlib

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from .argparse_doc import parser_doc, parser_nodes, subcommands
from .nodes import section


def command_parsers(spec: str) -> dict[str, argparse.ArgumentParser]:
    """``module:function`` (a function returning a parser) -> the command and each subcommand
    by the words typed: ``{"jupyter gpu": ..., "jupyter gpu status": ..., ...}``."""
    module, function = spec.split(":")
    parser: argparse.ArgumentParser = getattr(importlib.import_module(module), function)()
    commands = {parser.prog: parser}
    for name, sub in subcommands(parser).items():
        commands[f"{parser.prog} {name}"] = sub
    return commands


class CommandDirective(SphinxDirective):
    """``jupyter-gpu-command module:function``: a section per command and subcommand."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for words, parser in command_parsers(self.arguments[0]).items():
            node = section(words, f"command-{words}", self.state.document)
            node += parser_nodes(parser_doc(parser))
            out.append(node)
        return out
