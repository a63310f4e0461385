"""The instructor's page drawn in JupyterHub's own page template (navbar, logo, styles, dark
mode), so it looks part of the Hub and follows a Hub's custom templates.

The templates are the installed JupyterHub's (the service imports jupyterhub anyway), searched
after any ``--hub-template-path`` (the Hub's ``c.JupyterHub.template_paths``), with the Hub's own
``templates/`` prefix, as the Hub loads them. The Hub serves the styles, scripts and logo the
template links to (``/hub/static/``, ``/hub/logo``), on the same origin as this service behind the
proxy, so the dark-mode choice stored by the Hub's pages applies here too.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader
from jupyterhub._data import DATA_FILES_PATH

HERE = Path(__file__).parent / "templates"
HUB_TEMPLATES = Path(DATA_FILES_PATH) / "templates"


def environment(hub_template_paths: Sequence[str] = ()) -> Environment:
    """Our page first, then a Hub's custom templates, then the Hub's own (as ``page.html`` and
    ``templates/page.html``, the name custom templates extend)."""
    loader = ChoiceLoader(
        [
            PrefixLoader({"templates": FileSystemLoader([str(HUB_TEMPLATES)])}, "/"),
            FileSystemLoader([str(HERE), *hub_template_paths, str(HUB_TEMPLATES)]),
        ]
    )
    return Environment(loader=loader, autoescape=True)


@dataclass(frozen=True)
class _Spawner:
    options_form: None = None


@dataclass(frozen=True)
class PageUser:
    """What the Hub's template reads of its ``user`` (a ``jupyterhub.user.User`` there)."""

    name: str
    spawner: _Spawner = _Spawner()

    @property
    def json_escaped_name(self) -> str:  # the template puts it in a JS string, unescaped
        return json.dumps(self.name)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e")


def namespace(user: dict[str, Any], *, hub_prefix: str, base_url: str, xsrf: str) -> dict[str, Any]:
    """The variables the Hub's ``page.html`` uses, as the Hub's own handlers fill them, for
    ``user`` (the Hub's OAuth model of who is signed in). ``services`` stays empty: the Hub lists
    those a person may open from their full scopes, which this service's token does not carry."""
    return {
        "base_url": hub_prefix,
        "prefix": base_url,
        "user": PageUser(str(user["name"])),
        "admin_access": bool(user.get("admin")),
        "no_spawner_check": True,
        "parsed_scopes": set(user.get("scopes") or ()),
        "services": [],
        "login_url": urllib.parse.urljoin(hub_prefix, "login"),
        "logout_url": urllib.parse.urljoin(hub_prefix, "logout"),
        "static_url": lambda path, include_version=True: urllib.parse.urljoin(hub_prefix, f"static/{path}"),
        "version_hash": "",
        "xsrf_token": xsrf,
        "xsrf": xsrf,
        "announcement": None,
    }
