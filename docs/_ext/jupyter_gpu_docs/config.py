"""Configuration options read from the traitlets themselves: each option a class defines (not
those it inherits from jupyter_server's ExtensionApp or traitlets' Application), with its type,
default and help as the code has them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from .nodes import inline, paragraph


@dataclass(frozen=True)
class Option:
    name: str  # "GPUMonitor.interval"
    type: str  # "Float", or "'nvml' or 'simulated'" for an Enum
    default: str
    help: str


def configurable(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def options(cls: type) -> list[Option]:
    traits = cls.class_own_traits(config=True)  # type: ignore[attr-defined]
    out = []
    for name, trait in sorted(traits.items()):
        values = getattr(trait, "values", None)  # an Enum's choices
        kind = " or ".join(f"`{v!r}`" for v in values) if values else type(trait).__name__
        out.append(Option(f"{cls.__name__}.{name}", kind, trait.default_value_repr(), trait.help))
    return out


class ConfigDirective(SphinxDirective):
    """``jupyter-gpu-config module.Class``: a definition list of the class's own options."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        items = nodes.definition_list()
        for option in options(configurable(self.arguments[0])):
            term = nodes.term("", "", nodes.literal(option.name, option.name), nodes.Text(" : "))
            term += inline(option.type)
            term["ids"].append(nodes.make_id(f"config-{option.name}"))
            body = nodes.definition("", paragraph(f"Default: `{option.default}`"), paragraph(option.help))
            items += nodes.definition_list_item("", term, body)
        return [items]
