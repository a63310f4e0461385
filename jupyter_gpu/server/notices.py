"""Notices from outside the server to the user's open JupyterLab tabs: the Hub's idle-server
culler (``python -m jupyter_gpu.hub --cull-idle-servers``) posts ``api/gpu/notices/server-stop``
before it stops this server, and the student, who never sees the Hub's log or the instructor's
page, gets a notification in time to run a cell. Logged, and emitted as an event
(``events/server_stop.json``) as the quota watch emits its own.

The body comes from whoever holds a token of this server: it is checked field by field and cut to
size, and a bad one is refused in one line, never with a traceback.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.units import format_countdown
from .schema import VERSION

if TYPE_CHECKING:
    from .schema.replies import ServerStopNoticeReply

EVENT_SCHEMA = Path(__file__).parent / "events" / "server_stop.json"
EVENT_ID = "https://jupyter-gpu.readthedocs.io/events/server-stop"
MAX_STOP_IN = 86400  # a day: a notice further ahead is no warning
MAX_REASON = 300
MAX_BY = 100
MAX_BODY_BYTES = 16 * 2**10  # three short fields: anything bigger is not a notice
FIELDS = ("by", "reason", "stop_in_seconds")
EXAMPLE = '{"stop_in_seconds": 60, "reason": "every kernel idle for at least 30 min", "by": "the Hub"}'


class BadNotice(ValueError):
    """What is wrong with a notice's body, as the one line the 400 reply carries."""


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise BadNotice(f"`{name}` must be a string; got {type(value).__name__}.")
    # one line in a notification and a log: control characters (newlines too) become spaces
    flat = "".join(c if c.isprintable() else " " for c in value[: limit * 4])
    return " ".join(flat.split())[:limit]


def parse(body: bytes) -> tuple[float, str, str]:
    """``(stop_in_seconds, reason, by)`` of a notice's JSON body; ``BadNotice`` if it is not one."""
    if len(body) > MAX_BODY_BYTES:
        raise BadNotice(f"The body is over {MAX_BODY_BYTES // 1024} KiB: a notice is three short fields.")
    try:
        notice = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an integer of 5,000 digits
        notice = None
    if not isinstance(notice, dict):
        raise BadNotice(f"The body must be a JSON object such as {EXAMPLE}.")
    unknown = sorted(set(notice) - set(FIELDS))
    missing = [name for name in FIELDS if name not in notice]
    if unknown or missing:
        said = [f"unknown field(s): {', '.join(u[:40] for u in unknown[:5])}"] if unknown else []
        said += [f"missing: {', '.join(missing)}"] if missing else []
        raise BadNotice(f"The notice has {'; '.join(said)}. Fields: {', '.join(FIELDS)}.")
    stop_in = notice["stop_in_seconds"]
    if (
        isinstance(stop_in, bool)
        or not isinstance(stop_in, int | float)
        or not (math.isfinite(stop_in) and 0 <= stop_in <= MAX_STOP_IN)
    ):
        raise BadNotice(f"`stop_in_seconds` must be a number of seconds from 0 to {MAX_STOP_IN}.")
    reason, by = _text(notice["reason"], "reason", MAX_REASON), _text(notice["by"], "by", MAX_BY)
    if not by:
        raise BadNotice("`by` must say who stops the server; it is empty.")
    return float(stop_in), reason, by


def message(stop_in: float, reason: str, by: str) -> str:
    """The sentence of the notification (the frontend writes it again as time passes)."""
    why = reason.rstrip(". ")
    return (
        f"Your server will be stopped in {format_countdown(stop_in)} by {by}"
        + (f": {why}." if why else ".")
        + " Run a cell to keep it."
    )


class StopNotices:
    """Passes notices of this server's stop to the tabs (jupyter_server's event stream)."""

    def __init__(self, event_logger: Any, log: logging.Logger) -> None:
        self.event_logger = event_logger
        self.log = log
        event_logger.register_event_schema(EVENT_SCHEMA)

    def tell(self, stop_in: float, reason: str, by: str) -> ServerStopNoticeReply:
        text = message(stop_in, reason, by)
        self.log.warning("jupyter_gpu: told the user: %s", text)
        reply: ServerStopNoticeReply = {
            "version": VERSION,
            "stop_in_seconds": stop_in,
            "reason": reason,
            "by": by,
            "message": text,
        }
        self.event_logger.emit(schema_id=EVENT_ID, data={k: v for k, v in reply.items() if k != "version"})
        return reply
