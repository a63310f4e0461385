"""The Python types of the REST replies (jupyter_gpu/server/schema/replies.py) are the ones the
JSON Schemas define: the committed file is what the generator writes today, and the generator
refuses a schema it would have to guess at rather than write a wrong type."""

from __future__ import annotations

import copy
from typing import Any, get_args

import pytest

from jupyter_gpu.server.schema import VERSION, generate, replies

COMMAND = "python -m jupyter_gpu.server.schema.generate"


def test_the_committed_reply_types_are_what_the_schemas_generate():
    committed = generate.OUTPUT.read_text(encoding="utf-8")
    assert generate.generate() == committed, (
        f"{generate.OUTPUT.name} is out of date with the schemas beside it: run `{COMMAND}` and commit it"
    )


def test_the_types_hold_at_run_time_as_the_schemas_say():
    schemas = generate.load_schemas()
    kernels, telemetry = schemas["kernels.schema.json"], schemas["telemetry.schema.json"]
    assert replies.KernelsReply.__required_keys__ == frozenset(kernels["required"])
    gpu_sample = telemetry["$defs"]["gpu_sample"]
    assert replies.GpuSample.__required_keys__ == frozenset(gpu_sample["required"])
    assert replies.GpuSample.__optional_keys__ == frozenset(gpu_sample["properties"]) - set(
        gpu_sample["required"]
    )
    assert get_args(replies.Version) == (VERSION,)
    assert get_args(replies.NvmlProblem)[-1] is None  # the enum's null
    # the same $defs name in two files: two classes, the later one named by its route
    free_cache_device = schemas["free_cache.schema.json"]["$defs"]["device"]
    assert replies.FreeCacheDevice.__required_keys__ == frozenset(free_cache_device["required"])
    assert replies.Device.__required_keys__ == frozenset(
        schemas["devices.schema.json"]["$defs"]["device"]["required"]
    )


def _at(schemas: dict[str, Any], file: str, *path: str) -> dict[str, Any]:
    node = schemas[file]
    for key in path:
        node = node[key]
    return node


# (file, path to a schema in it, what to change there, what the error must name)
REFUSED = [
    ("kernels.schema.json", ("properties", "hidden_processes"), {"anyOf": [{"type": "integer"}]}, "anyOf"),
    ("kernels.schema.json", ("$defs", "pool_sizes"), {"allOf": [{"required": ["large"]}]}, "allOf"),
    ("common.schema.json", ("$defs", "unsupported"), {"patternProperties": {"^x": {}}}, "patternProperties"),
    ("devices.schema.json", ("properties", "driver_version"), {"format": "ipv4"}, "format"),
    ("devices.schema.json", ("properties", "driver_version"), {"type": ["string", "object"]}, "object"),
    (
        "cells.schema.json",
        ("properties", "cells"),
        {"items": {"$ref": "#/properties/path"}},
        "#/properties/path",
    ),
    ("cells.schema.json", ("$defs", "ranked_cell"), {"additionalProperties": True}, "additionalProperties"),
    ("telemetry.schema.json", ("$defs", "sample"), {"if": {"properties": {"nope": {}}}}, "nope"),
    (
        "free_cache.schema.json",
        ("properties", "devices"),
        {"items": {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}}},
        "$defs entry",
    ),
]


@pytest.mark.parametrize(("file", "path", "change", "named"), REFUSED, ids=[named for *_, named in REFUSED])
def test_a_schema_feature_the_generator_does_not_handle_is_refused_by_name_and_place(
    file, path, change, named
):
    schemas = copy.deepcopy(generate.load_schemas())
    _at(schemas, file, *path).update(change)
    with pytest.raises(generate.SchemaError) as refused:
        generate.generate(schemas)
    message = str(refused.value)
    assert named in message and file in message, message
