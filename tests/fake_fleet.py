"""A hundred cheap user servers behind one fake proxy, and a fake Hub API listing them: for the
fan-out tests and benchmarks/hub_page.py. Each user's behaviour is one of ``BEHAVIOURS``."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from tornado import web
from tornado.httpserver import HTTPServer

from jupyter_gpu.server.schema import VERSION

BEHAVIOURS = ("ok", "slow", "hung", "garbage", "wrong_shape", "closed")


def kernels_reply(user: str, n: int = 2) -> dict[str, Any]:
    return {
        "version": VERSION,
        "kernels": [
            {
                "id": f"{user}-k{i}",
                "name": "python3",
                "execution_state": "idle",
                "path": f"{user}/nb{i}.ipynb",
                "pid": 1000 + i,
                "gpu_memory": [
                    {
                        "gpu_index": i % 2,
                        "uuid": f"GPU-{i % 2}",
                        "used_memory_bytes": (i + 1) * 2**30,
                        "pids": [1000 + i],
                    }
                ],
                "allocator": None,
                "allocator_state": "no_stats",
                "allocator_reason": "not loaded",
                "idle_seconds": 600.0 * (i + 1),
                "idle_holding": i == 1,
            }
            for i in range(n)
        ],
    }


def telemetry_reply(t: float) -> dict[str, Any]:
    gpus = [
        {
            "index": i,
            "uuid": f"GPU-{i}",
            "state": "ok",
            "memory_used_bytes": 2**33,
            "memory_total_bytes": 2**37,
        }
        for i in range(2)
    ]
    return {"version": VERSION, "latest": {"t": t, "gpus": gpus}, "history": []}


class UserRoute(web.RequestHandler):
    def initialize(self, fleet: FakeFleet) -> None:
        self.fleet = fleet

    async def get(self, user: str, route: str) -> None:
        self.fleet.seen_tokens.setdefault(user, set()).add(self.request.headers.get("Authorization", ""))
        behaviour = self.fleet.behaviour[user]
        if behaviour == "slow":
            await asyncio.sleep(self.fleet.slow_seconds)
        elif behaviour == "hung":
            await asyncio.sleep(3600)
        elif behaviour == "closed":
            self.request.connection.stream.close()
            return
        if behaviour == "garbage":
            self.finish("<html>Service Unavailable</html>")
        elif behaviour == "wrong_shape":
            self.finish({"version": VERSION, "kernels": [{"id": 7}]})
        else:
            self.finish(kernels_reply(user) if route == "kernels" else telemetry_reply(1.0))


class UsersRoute(web.RequestHandler):
    def initialize(self, fleet: FakeFleet) -> None:
        self.fleet = fleet

    def get(self) -> None:
        items = [
            {"name": u, "servers": {"": {"ready": True, "url": f"/user/{u}/"}}} for u in self.fleet.behaviour
        ]
        self.finish(
            json.dumps(
                {
                    "items": items,
                    "_pagination": {"offset": 0, "limit": 200, "total": len(items), "next": None},
                }
            )
        )


class TokensRoute(web.RequestHandler):
    """The Hub's token API for a user: mints numbered tokens, records scopes and revocations."""

    def initialize(self, fleet: FakeFleet) -> None:
        self.fleet = fleet

    def post(self, user: str, token_id: str | None = None) -> None:
        body = json.loads(self.request.body)
        n = len(self.fleet.minted)
        self.fleet.minted.append((user, body["scopes"]))
        self.finish({"token": f"tok-{user}-{n}", "id": f"a{n}"})

    def delete(self, user: str, token_id: str) -> None:
        self.fleet.revoked.append((user, token_id))
        self.set_status(204)


class FakeFleet:
    """Start with ``await fleet.start()`` inside a running loop; ``url`` is proxy and Hub in one."""

    def __init__(self, behaviour: dict[str, str], *, slow_seconds: float = 0.5) -> None:
        self.behaviour = behaviour
        self.slow_seconds = slow_seconds
        self.seen_tokens: dict[str, set[str]] = {}  # user -> Authorization headers its server got
        self.minted: list[tuple[str, list[str]]] = []
        self.revoked: list[tuple[str, str]] = []

    async def start(self) -> None:
        kwargs = {"fleet": self}
        app = web.Application(
            [
                (r"/user/([^/]+)/api/gpu/(kernels|telemetry)", UserRoute, kwargs),
                (r"/hub/api/users", UsersRoute, kwargs),
                (r"/hub/api/users/([^/]+)/tokens(?:/([^/]+))?", TokensRoute, kwargs),
            ]
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        sock.setblocking(False)
        self.http = HTTPServer(app)
        self.http.add_sockets([sock])
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    def stop(self) -> None:
        self.http.stop()


def mixed(n: int) -> dict[str, str]:
    """n users: mostly answering, every tenth slow, and one each hung, garbage, wrong shape, closed."""
    behaviour = {f"student{i:03d}": ("slow" if i % 10 == 5 else "ok") for i in range(n)}
    for name, kind in zip(sorted(behaviour)[-4:], ("hung", "garbage", "wrong_shape", "closed")):
        behaviour[name] = kind
    return behaviour
