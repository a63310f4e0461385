"""Every magic that ``%load_ext jupyter_gpu`` registers, with its options, read from the
``Magics`` classes of the extension's feature modules (``kernel.extension.FEATURES``)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from .argparse_doc import ParserDoc, parser_doc, parser_nodes
from .nodes import prose, section


@dataclasses.dataclass(frozen=True)
class MagicDoc:
    name: str
    kinds: tuple[str, ...]  # "line", "cell" or both
    module: str
    doc: ParserDoc | None  # None: the magic takes no options (its docstring says what it takes)
    docstring: str

    @property
    def usage_doc(self) -> ParserDoc:
        """The parser's doc, its usage typed as the magic is: ``%%`` for a cell magic alone."""
        assert self.doc is not None
        if self.kinds != ("cell",):
            return self.doc
        return dataclasses.replace(self.doc, usage="%" + self.doc.usage)

    @property
    def title(self) -> str:
        return ", ".join(("%" if kind == "line" else "%%") + self.name for kind in self.kinds)


def _magics_classes(module: Any) -> list[type]:
    from IPython.core.magic import Magics

    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, Magics) and cls.__module__ == module.__name__ and getattr(cls, "magics", None)
    ]


def magic_docs() -> list[MagicDoc]:
    """One entry per magic method, in the order of the extension's features, then by name."""
    from jupyter_gpu.kernel.extension import FEATURES

    docs: list[MagicDoc] = []
    for feature in FEATURES:
        module = importlib.import_module(feature)
        for cls in _magics_classes(module):
            # IPython's table: kind -> magic name -> method; a line-and-cell magic is in both
            named: dict[str, tuple[str, list[str]]] = {}
            for kind in ("line", "cell"):
                for name, method in cls.magics[kind].items():
                    named.setdefault(method, (name, []))[1].append(kind)
            for method, (name, kinds) in sorted(named.items(), key=lambda item: item[1][0]):
                func = getattr(cls, method)
                parser = getattr(func, "parser", None)
                docstring = inspect.cleandoc(parser.description if parser else func.__doc__ or "")
                docs.append(
                    MagicDoc(name, tuple(kinds), feature, parser_doc(parser) if parser else None, docstring)
                )
    return docs


class MagicsDirective(SphinxDirective):
    """``jupyter-gpu-magics``: a section per magic, with its usage, its help and its options."""

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for magic in magic_docs():
            node = section(magic.title, f"magic-{magic.name}", self.state.document)
            if magic.doc is not None:
                node += parser_nodes(magic.usage_doc)
            else:
                node += prose(magic.docstring)
            out.append(node)
        return out
