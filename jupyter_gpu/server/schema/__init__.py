"""JSON Schemas (Draft 2020-12) of the REST replies under ``{base_url}api/gpu/``, one per route.

``<route>.schema.json`` describes ``GET api/gpu/<route>``; ``common.schema.json`` holds what the
routes share (the schema version, NVML's state). They ship in the package so that any client can
check what it receives; the server tests validate every reply against them, and the frontend's
TypeScript types are generated from them (``jlpm build:schema`` in labextension/), and so are the
Python ones the server and the CLI build and read replies with: ``replies.py``, TypedDicts written
by ``python -m jupyter_gpu.server.schema.generate``. ``../openapi.yaml`` (OpenAPI 3.1) describes
the routes themselves, their parameters and error codes, and names these files for the replies.
Replies are not validated at run time: the telemetry reply is assembled from pre-encoded samples
for speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .replies import Version

SCHEMA_DIR = Path(__file__).parent


def load(name: str) -> dict[str, Any]:
    """The schema in ``<name>.schema.json`` (``common``, or a route: ``devices``, ...)."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


# Read from the schema so that the number every reply carries is written down once.
VERSION: Version = load("common")["$defs"]["version"]["const"]
