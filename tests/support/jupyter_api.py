"""A front end's view of the in-process test server: sessions, the GPU routes held to their
schemas, and ``jupyter gpu status`` pointed at it, for test modules that must not import
another test module."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO / "jupyter_gpu" / "server" / "schema"
_SCHEMAS = Registry().with_resources(
    (path.name, Resource.from_contents(json.loads(path.read_text()), default_specification=DRAFT202012))
    for path in SCHEMA_DIR.glob("*.schema.json")
)


async def start_notebook_kernel(jp_fetch: Any, path: str, kernel: str = "python3") -> str:
    """Open a notebook as JupyterLab does (a session with a kernel of that spec); its kernel id."""
    body = json.dumps({"path": path, "type": "notebook", "name": "", "kernel": {"name": kernel}})
    response = await jp_fetch("api", "sessions", method="POST", body=body)
    return json.loads(response.body)["kernel"]["id"]


async def gpu_reply(jp_fetch: Any, *route: str, schema: str) -> dict[str, Any]:
    """``GET api/gpu/<route>``, failing the test where the reply breaks ``schema``."""
    response = await jp_fetch("api", "gpu", *route)
    body = json.loads(response.body)
    validator = Draft202012Validator({"$ref": schema}, registry=_SCHEMAS)
    error = best_match(validator.iter_errors(body))
    assert error is None, f"the reply breaks {schema} at {error.json_path}: {error.message}"
    return body


async def wait_for(what: str, predicate: Callable[[], Awaitable[T | None]], timeout: float = 30.0) -> T:
    """Await ``predicate()`` until it gives something true and return that; fail naming ``what``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}", pytrace=False)
        await asyncio.sleep(0.05)


async def gpu_status(url: str, token: str, *extra: str) -> str:
    """What ``jupyter gpu status --url <url>`` prints (run as a user would, in its own process)."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jupyter_gpu",
        "status",
        "--url",
        url,
        "--token",
        token,
        *extra,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()
