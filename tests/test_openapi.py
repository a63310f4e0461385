"""The REST API's OpenAPI description (jupyter_gpu/server/openapi.yaml) against the server it
describes: a valid OpenAPI 3.1 document, with exactly the routes and methods a running server
registers under api/gpu/, and every live reply, errors included, as the document says."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from support.jupyter_api import start_notebook_kernel
from support.kernel_client import run_cell
from support.waiting import wait_for

import jupyter_gpu.server
from jupyter_gpu.server.schema import VERSION

SPEC_FILE = Path(jupyter_gpu.server.__file__).parent / "openapi.yaml"
SPEC_URI = SPEC_FILE.as_uri()
SPEC = yaml.safe_load(SPEC_FILE.read_text(encoding="utf-8"))
VERBS = ("get", "put", "post", "patch", "delete", "head", "options")
OPERATIONS = [(path, verb) for path, item in SPEC["paths"].items() for verb in VERBS if verb in item]
GETS = [path for path, verb in OPERATIONS if verb == "get"]
A_KERNEL = "8c3f2a10-0000-4000-8000-000000000000"  # an id no kernel has
NOTICE = {"stop_in_seconds": 60, "reason": "every kernel idle for 30 min", "by": "the Hub"}


def escape(part: str) -> str:
    """One JSON pointer segment (RFC 6901): paths hold slashes."""
    return part.replace("~", "~0").replace("/", "~1")


def _load(uri: str) -> Resource[Any]:
    """The document at a file URI (the spec's $refs name schema files beside it)."""
    text = Path(unquote(urlsplit(uri).path)).read_text(encoding="utf-8")
    return Resource.from_contents(yaml.safe_load(text), default_specification=DRAFT202012)


REGISTRY: Registry[Any] = Registry(retrieve=_load).with_resource(SPEC_URI, _load(SPEC_URI))


@cache
def _validator(pointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{SPEC_URI}#{pointer}"}, registry=REGISTRY)


def check(path: str, verb: str, code: int, content_type: str, body: bytes) -> Any:
    """The reply to ``verb path`` is one the spec declares for that operation: its status code is
    listed, and its JSON body follows the schema given there. Returns the body."""
    responses = SPEC["paths"][path][verb]["responses"]
    assert str(code) in responses, (
        f"{verb.upper()} {path} answered {code}; the spec lists {sorted(responses)}"
    )
    pointer = f"/paths/{escape(path)}/{verb}/responses/{code}"
    declared = responses[str(code)]
    if "$ref" in declared:  # a shared response of components/responses
        pointer = declared["$ref"].removeprefix("#")
        declared = REGISTRY.resolver(SPEC_URI).lookup(declared["$ref"]).contents
    assert content_type.startswith("application/json") and "application/json" in declared["content"]
    reply = json.loads(body)
    error = best_match(_validator(f"{pointer}/content/application~1json/schema").iter_errors(reply))
    assert error is None, (
        f"{verb.upper()} {path} {code} breaks the spec at {error.json_path}: {error.message}"
    )
    return reply


async def call(
    jp_fetch: Any,
    path: str,
    verb: str = "get",
    params: dict[str, str] | None = None,
    body: Any = None,
    kernel_id: str = A_KERNEL,
    **fetch: Any,
) -> tuple[int, Any]:
    """``verb path`` (with ``kernel_id`` in it, where it takes one) on the test server, its reply
    checked against the spec; (status code, JSON body)."""
    parts = path.replace("{kernel_id}", kernel_id).strip("/").split("/")
    if verb == "post":
        fetch["body"] = json.dumps(body if body is not None else {})
    response = await jp_fetch(*parts, method=verb.upper(), params=params or {}, raise_error=False, **fetch)
    content_type = response.headers.get("Content-Type", "")
    return response.code, check(path, verb, response.code, content_type, response.body)


def registered_routes(serverapp: Any) -> dict[str, set[str]]:
    """OpenAPI path -> HTTP verbs, for every handler the running server routes under
    {base_url}api/gpu/ (tornado's rules, nested routers included), named groups as ``{name}``."""
    routes: dict[str, set[str]] = {}
    rules = list(serverapp.web_app.default_router.rules)
    while rules:
        rule = rules.pop()
        if hasattr(rule.target, "rules"):  # a router: add_handlers() puts each host's rules in one
            rules.extend(rule.target.rules)
            continue
        pattern = getattr(rule.matcher, "regex", None)
        if pattern is None or "/api/gpu/" not in pattern.pattern:
            continue
        path = pattern.pattern.removesuffix("$")
        path = path[path.index("/api/gpu/") :]  # after the base_url
        for name in pattern.groupindex:
            path = path.replace(f"(?P<{name}>[^/]+)", f"{{{name}}}")
        # the verbs jupyter_gpu implements (jupyter_server's APIHandler answers OPTIONS, CORS
        # preflights, on every API route)
        routes[path] = {v for v in VERBS if getattr(rule.target, v).__module__.startswith("jupyter_gpu.")}
    return routes


# -- the document --------------------------------------------------------------------------------


def test_the_spec_is_valid_openapi_3_1_with_its_schemas():
    # base_uri: the validator follows each $ref into schema/*.schema.json and checks those too. It
    # runs in a Python of its own: the suite's process stays free of its C extensions
    # (lazy-object-proxy), as of everything in-process that this test does not need.
    check = (
        "import sys, yaml; from openapi_spec_validator import validate; "
        "validate(yaml.safe_load(open(sys.argv[1], encoding='utf-8')), base_uri=sys.argv[2])"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(SPEC_FILE), SPEC_URI], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert SPEC["openapi"].startswith("3.1.")
    assert SPEC["info"]["version"] == str(VERSION)  # the `version` every reply carries


def test_every_operation_needs_a_token_and_declares_403():
    assert SPEC["security"] and all(
        SPEC["components"]["securitySchemes"][s] for r in SPEC["security"] for s in r
    )
    for path, verb in OPERATIONS:
        operation = SPEC["paths"][path][verb]
        assert operation.get("security", SPEC["security"]), f"{verb} {path} is open"
        assert "403" in operation["responses"], f"{verb} {path} does not say it answers 403"


async def test_its_paths_are_the_routes_the_server_registers(jp_serverapp):
    routes = registered_routes(jp_serverapp)
    # the control: a route with a parameter was found and translated, under pytest-jupyter's
    # base_url (/a%40b/)
    assert routes["/api/gpu/kernels/{kernel_id}/free-cache"] == {"post"}
    described = {path: {v for v in VERBS if v in item} for path, item in SPEC["paths"].items()}
    assert described == routes


# -- live replies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path, verb", OPERATIONS)
@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_every_operation_answers_403_without_a_valid_token(jp_fetch, path, verb, token):
    # an empty Authorization header stops jp_fetch from adding the real token
    headers = {"Authorization": f"token {token}" if token else ""}
    code, reply = await call(jp_fetch, path, verb, body=NOTICE, headers=headers)
    assert code == 403 and reply["message"]


@pytest.mark.parametrize("path", GETS)
async def test_an_unknown_query_parameter_is_a_400_the_spec_declares(jp_fetch, path):
    code, reply = await call(jp_fetch, path, params={"sinse": "0"})
    assert code == 400 and "Unknown query parameter(s): sinse" in reply["message"]


async def test_the_gpu_routes_reply_as_described(jp_fetch, gpu_monitor):
    async def sampled():
        code, reply = await call(jp_fetch, "/api/gpu/telemetry")
        return reply if code == 200 and reply["latest"] else None

    telemetry = await wait_for(sampled, timeout=10)
    assert telemetry["available"] and telemetry["history"]
    since = {"since": str(telemetry["history"][-1]["t"])}
    assert (await call(jp_fetch, "/api/gpu/telemetry", params=since))[0] == 200
    for bad in ("yesterday", "-1", "nan"):
        code, reply = await call(jp_fetch, "/api/gpu/telemetry", params={"since": bad})
        assert code == 400 and "`since` must be a time in seconds" in reply["message"]
    for path in ("/api/gpu/devices", "/api/gpu/kernels", "/api/gpu/host", "/api/gpu/exits"):
        code, reply = await call(jp_fetch, path)
        assert code == 200 and reply["version"] == VERSION


async def test_a_kernels_routes_reply_as_described(jp_fetch, gpu_monitor, kernel_env):
    cells, free = "/api/gpu/kernels/{kernel_id}/cells", "/api/gpu/kernels/{kernel_id}/free-cache"
    for path, verb in ((cells, "get"), (free, "post")):
        code, reply = await call(jp_fetch, path, verb)
        assert code == 404 and reply["message"] == f"No kernel with id {A_KERNEL!r} on this server."

    kernel_id = await start_notebook_kernel(jp_fetch, "course/api.ipynb")
    code, reply = await call(jp_fetch, free, "post", kernel_id=kernel_id)
    assert code == 409 and "jupyter_gpu is not loaded in this kernel" in reply["message"]

    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    await run_cell(kernel, "%load_ext jupyter_gpu")
    await run_cell(kernel, "x = 1")

    async def recorded():
        code, reply = await call(jp_fetch, cells, kernel_id=kernel_id)
        return reply if code == 200 and reply["cells"] else None

    page = await wait_for(recorded, timeout=15)
    assert page["kernel_id"] == kernel_id and page["path"] == "course/api.ipynb"
    code, _ = await call(jp_fetch, cells, params={"since": "0", "limit": "1"}, kernel_id=kernel_id)
    assert code == 200
    for bad in ({"limit": "0"}, {"limit": "1001"}, {"since": "-1"}, {"since": "first"}):
        code, reply = await call(jp_fetch, cells, params=bad, kernel_id=kernel_id)
        assert code == 400 and reply["message"].startswith(f"`{next(iter(bad))}` must be")

    async def idle():
        model = json.loads((await jp_fetch("api", "kernels", kernel_id)).body)
        return model["execution_state"] == "idle"

    await wait_for(idle, timeout=15)  # free-cache refuses a busy kernel
    code, reply = await call(jp_fetch, free, "post", kernel_id=kernel_id)
    assert code == 200 and reply["kernel_id"] == kernel_id and reply["freed_bytes"] == 0


async def test_a_server_stop_notice_replies_as_described(jp_fetch, gpu_monitor):
    path = "/api/gpu/notices/server-stop"
    body = _validator(f"/paths/{escape(path)}/post/requestBody/content/application~1json/schema")
    code, reply = await call(jp_fetch, path, "post", body=NOTICE)
    assert body.is_valid(NOTICE) and code == 200
    assert reply["stop_in_seconds"] == 60 and reply["by"] == "the Hub"
    for bad in ({**NOTICE, "stop_in_seconds": -5}, {**NOTICE, "by": ""}, {"reason": "no one said"}, [1, 2]):
        code, reply = await call(jp_fetch, path, "post", body=bad)
        assert not body.is_valid(bad) and code == 400 and reply["message"]  # both refuse it
