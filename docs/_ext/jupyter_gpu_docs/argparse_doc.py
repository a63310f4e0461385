"""An argparse parser as documentation, read from the parser itself: its usage line, its
description and one row per argument. The magics' ``magic_arguments`` parsers and the CLI's
parsers are both argparse parsers, so both pages come from here and cannot drift from the code."""

from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass

from docutils import nodes

from .nodes import literal_block, prose, table


@dataclass(frozen=True)
class Argument:
    invocation: str  # "--dtype DTYPE" or "script"
    help: str
    default: str  # "" when there is nothing worth showing


@dataclass(frozen=True)
class ParserDoc:
    usage: str
    description: str
    arguments: tuple[Argument, ...]
    epilog: str


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, "", [], argparse.SUPPRESS) or action.required:
        return ""
    return f"`{action.default}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    # argparse's own expansion of %(default)s and the like, as --help prints it
    return parser._get_formatter()._expand_help(action) if action.help else ""


def _usage(parser: argparse.ArgumentParser) -> str:
    text = parser.format_usage().strip()
    # IPython's magic parsers start their usage with "::" and "%"; argparse's with "usage: "
    return text.removeprefix("::").strip().removeprefix("usage: ")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser`` by name, in the order they were added."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def parser_doc(parser: argparse.ArgumentParser) -> ParserDoc:
    arguments = tuple(
        Argument(_invocation(a), _help(parser, a), _default(a))
        for a in parser._actions
        if a.help != argparse.SUPPRESS
        and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
    )
    return ParserDoc(
        _usage(parser), inspect.cleandoc(parser.description or ""), arguments, parser.epilog or ""
    )


def parser_nodes(doc: ParserDoc) -> list[nodes.Node]:
    """Usage as typed, the description, then a table of the arguments."""
    out: list[nodes.Node] = [literal_block(doc.usage), *prose(doc.description)]
    if doc.arguments:
        rows = [(f"`{a.invocation}`", a.default, a.help) for a in doc.arguments]
        out.append(table(("argument", "default", "what it does"), rows, (3, 1, 6)))
    return [*out, *prose(doc.epilog)]
