"""A front end's view of the in-process test server (pytest-jupyter's ``jp_fetch``): sessions,
the GPU routes with every reply held to its schema, and a notebook with jupyter_gpu loaded."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jupyter_server.auth.authorizer import Authorizer
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from jupyter_gpu.server.schema import SCHEMA_DIR, load
from support.kernel_client import CellRunner

# The schemas $ref each other by file name, so each is registered under its file name.
SCHEMAS = Registry().with_resources(
    (path.name, Resource.from_contents(json.loads(path.read_text()), default_specification=DRAFT202012))
    for path in SCHEMA_DIR.glob("*.schema.json")
)
# The routes whose replies say whether NVML works. ``kernels/<id>/cells`` (one kernel's timeline,
# test_cell_timeline_server.py) is about a kernel, not about NVML.
ROUTES = ("devices", "telemetry", "kernels")
VALIDATORS = {
    route: Draft202012Validator({"$ref": f"{route}.schema.json"}, registry=SCHEMAS)
    for route in load("api")["properties"]
}


def check_reply(route: str, body: dict) -> None:
    """The reply follows its route's schema and, for the routes that read NVML (their schemas
    require ``state``), says yes or no as its state does and names a problem exactly when NVML is
    unavailable."""
    error = best_match(VALIDATORS[route].iter_errors(body))
    assert error is None, f"the {route} reply breaks its schema at {error.json_path}: {error.message}"
    if "state" not in body:  # host, exits: not NVML's
        return
    assert body["available"] == (body["state"] == "ok"), body
    assert (body["problem"] is None) == (body["state"] != "unavailable"), body


async def get(jp_fetch: Any, route: str, **params: Any) -> dict:
    """A route's reply, held to its schema: so every server test checks the replies it sees."""
    response = await jp_fetch("api", "gpu", route, params=params)
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    body = json.loads(response.body)
    check_reply(route, body)
    return body


async def gpu_reply(jp_fetch: Any, *route: str, schema: str) -> dict[str, Any]:
    """``GET api/gpu/<route>``, failing the test where the reply breaks ``schema``."""
    response = await jp_fetch("api", "gpu", *route)
    body = json.loads(response.body)
    validator = Draft202012Validator({"$ref": schema}, registry=SCHEMAS)
    error = best_match(validator.iter_errors(body))
    assert error is None, f"the reply breaks {schema} at {error.json_path}: {error.message}"
    return body


async def get_cells(jp_fetch: Any, kernel_id: str) -> dict[str, Any]:
    """``GET api/gpu/kernels/<id>/cells``: one kernel's timeline, held to its schema."""
    return await gpu_reply(jp_fetch, "kernels", kernel_id, "cells", schema="cells.schema.json")


async def start_notebook_kernel(jp_fetch: Any, path: str, kernel: str = "python3") -> str:
    """Open a notebook as JupyterLab does (a session with a kernel of that spec); its kernel id."""
    body = json.dumps({"path": path, "type": "notebook", "name": "", "kernel": {"name": kernel}})
    response = await jp_fetch("api", "sessions", method="POST", body=body)
    return json.loads(response.body)["kernel"]["id"]


@contextlib.asynccontextmanager
async def notebook(jp_fetch: Any, jp_serverapp: Any) -> AsyncIterator[tuple[str, CellRunner]]:
    """A notebook's kernel with jupyter_gpu loaded, and a front end to run its cells."""
    kernel_id = await start_notebook_kernel(jp_fetch, "course/timeline.ipynb")
    async with CellRunner(jp_serverapp.kernel_manager.get_kernel(kernel_id)) as cells:
        assert (await cells.run("%load_ext jupyter_gpu")).status == "ok"
        yield kernel_id, cells


async def start_extensions(gpu_monitor: Any) -> None:
    """What `jupyter server` does once its event loop runs (pytest-jupyter leaves it out):
    the extension's periodic tasks, the culler's and the quota watch's among them, start."""
    await gpu_monitor.serverapp.extension_manager.start_all_extensions()


def with_server_app(
    config: dict, *, authorizer: type | None = None, extensions: tuple[str, ...] = ()
) -> dict:
    """pytest-jupyter's ``jp_server_config`` with another authorizer and more server extensions
    enabled (JupyterLab's, Notebook 7's), for a module's or class's own fixture."""
    server_app = dict(config["ServerApp"])
    if authorizer is not None:
        server_app["authorizer_class"] = authorizer
    if extensions:
        server_app["jpserver_extensions"] = {
            **server_app["jpserver_extensions"],
            **dict.fromkeys(extensions, True),
        }
    return {**config, "ServerApp": server_app}


# JupyterLab's and Notebook 7's pages carry their settings as JSON in this script.
CONFIG_DATA = re.compile(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', re.S)


async def page_config(jp_fetch: Any, *path: str) -> dict[str, Any]:
    """The page_config of one of the front end's pages, as the browser reads it."""
    response = await jp_fetch(*path)
    assert response.code == 200
    match = CONFIG_DATA.search(response.body.decode())
    assert match, "the page has no jupyter-config-data"
    return json.loads(match.group(1))


class DenyGPU(Authorizer):
    """A server's authorizer that lets its user do anything but read or use the GPUs
    (``authorizer_class`` in ServerApp's config)."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "gpu"
