"""The events a real jupyter_server emits, as JupyterLab's event stream gets them."""

from __future__ import annotations

from typing import Any


def recorded(serverapp: Any, schema: str) -> list[dict[str, Any]]:
    """A list that fills with the data of each event of ``schema`` from now on."""
    seen: list[dict[str, Any]] = []

    async def listen(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(data)

    serverapp.event_logger.add_listener(schema_id=schema, listener=listen)
    return seen
