"""The REST replies follow the JSON Schemas the package ships (jupyter_gpu/server/schema/).

Every server test holds the replies it fetches to their route's schema (``support.jupyter_api.get``),
so the states those tests reach (simulated H200s, a lost GPU, MIG, no driver, NVML failing mid-run,
refused stats files) are checked there. Here: the schemas themselves, and the states no other test
reaches: every allocator state of a kernel, NVML before its first attempt, and the replies
recorded on a real 2×H200 machine that the browser test renders.
"""

from __future__ import annotations

import json
import time
from typing import get_args

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from support.jupyter_api import ROUTES, VALIDATORS, check_reply, get, start_notebook_kernel
from support.paths import FIXTURES
from support.stats_files import fixture_device, publish, stats_doc

from jupyter_gpu.nvml.reasons import PROBLEMS, problem_of_kind
from jupyter_gpu.server.kernel_stats import AllocatorState
from jupyter_gpu.server.sampler import NvmlState, Status
from jupyter_gpu.server.schema import SCHEMA_DIR, load
from jupyter_gpu.server.telemetry import devices_payload, telemetry_json


@pytest.mark.parametrize("path", sorted(SCHEMA_DIR.glob("*.schema.json")), ids=lambda path: path.name)
def test_every_schema_is_a_valid_draft_2020_12_schema(path):
    schema = json.loads(path.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_every_route_has_its_schema():
    assert set(load("api")["properties"]) == {
        *ROUTES,
        "cells",
        "free_cache",
        "host",
        "exits",
        "server_stop_notice",
    }
    assert {path.name.removesuffix(".schema.json") for path in SCHEMA_DIR.glob("*.schema.json")} == {
        "api",
        "common",
        *load("api")["properties"],
    }


@pytest.mark.parametrize("route", ROUTES)
def test_every_reply_must_carry_the_schema_version_and_nvml_state(route):
    schema = load(route)
    for field in ("version", "state", "problem", "reason"):
        assert field in schema["required"]
    assert schema["properties"]["version"] == {"$ref": "common.schema.json#/$defs/version"}
    assert schema["properties"]["state"] == {"$ref": "common.schema.json#/$defs/nvml_state"}
    assert schema["properties"]["problem"] == {"$ref": "common.schema.json#/$defs/nvml_problem"}


def test_the_schemas_list_the_states_the_server_has():
    assert list(get_args(NvmlState)) == load("common")["$defs"]["nvml_state"]["enum"]
    other = problem_of_kind("other", "detail").kind
    assert load("common")["$defs"]["nvml_problem"]["enum"] == [*PROBLEMS, other, None]
    assert list(get_args(AllocatorState)) == load("kernels")["$defs"]["allocator_state"]["enum"]


def test_replies_before_nvml_was_first_tried():
    """The sampler's first attempt comes within milliseconds of the server's start."""
    status = Status()
    assert status.state == "starting" and not status.available
    check_reply("devices", devices_payload(status, simulated=False))
    body = telemetry_json(status, None, [], simulated=True, interval=1.0, now=time.time(), owners=[])
    check_reply("telemetry", json.loads(body))


@pytest.mark.parametrize("route", ROUTES)
def test_replies_recorded_on_h200_fit(route):
    """Real NVML figures (integers, floats, nulls) as test_gpu_server recorded them."""
    check_reply(route, json.loads((FIXTURES / "h200_api" / f"{route}.json").read_text()))


@pytest.mark.parametrize(("route", "name"), [("cells", "cells"), ("kernels", "kernels_with_cells")])
def test_the_timeline_recorded_on_an_h200_fits(route, name):
    """What test_cell_timeline_gpu recorded: real allocator and NVML figures, cell by cell."""
    body = json.loads((FIXTURES / "h200_api" / f"{name}.json").read_text())
    error = best_match(VALIDATORS[route].iter_errors(body))
    assert error is None, f"{error.json_path}: {error.message}"


async def test_every_allocator_state_fits_and_says_what_happened(jp_fetch, gpu_monitor):
    kernels = {
        state: await start_notebook_kernel(jp_fetch, f"{state}.ipynb") for state in get_args(AllocatorState)
    }

    def doc(state: str, **changes) -> str:
        return json.dumps(
            {**json.loads(stats_doc(gpu_monitor, kernels[state], [fixture_device()])), **changes}
        )

    publish(gpu_monitor, kernels["ok"], doc("ok"))
    publish(gpu_monitor, kernels["no_cuda"], doc("no_cuda", cuda_in_use=False, devices=[]))
    publish(gpu_monitor, kernels["refused"], doc("refused")).chmod(0o666)
    publish(gpu_monitor, kernels["malformed"], doc("malformed")[:-20])
    publish(gpu_monitor, kernels["stale"], doc("stale", time=time.time() - 60))

    body = await get(jp_fetch, "kernels")
    seen = {k["id"]: k for k in body["kernels"]}
    assert {state: seen[kernel_id]["allocator_state"] for state, kernel_id in kernels.items()} == {
        state: state for state in kernels
    }
    reasons = {state: seen[kernel_id]["allocator_reason"] for state, kernel_id in kernels.items()}
    assert reasons.pop("stale").startswith("stats file is stale: written 6")  # 60 s, or 61 on a slow day
    assert reasons == {
        "ok": None,
        "no_cuda": "PyTorch has not initialised CUDA in this kernel",
        "no_stats": "no stats file: jupyter_gpu is not loaded in this kernel",
        "refused": "stats file is writable by other users",
        "malformed": "stats file is not valid JSON (truncated or corrupt)",
    }
    assert seen[kernels["no_cuda"]]["allocator"]["cuda_in_use"] is False
