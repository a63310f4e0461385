"""A hundred cheap user servers behind one fake proxy, and a fake Hub API listing them: for the
fan-out tests and benchmarks/hub_page.py. Each user's behaviour is one of ``BEHAVIOURS``; the
last four are what a student's own code can make her server answer (tests/test_hub_hostile.py)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from tornado import web
from tornado.httpserver import HTTPServer
from tornado.iostream import StreamClosedError

from jupyter_gpu.server.schema import VERSION

BEHAVIOURS = (
    "ok",
    "slow",
    "hung",
    "garbage",
    "wrong_shape",
    "closed",
    "hostile",
    "long_version",
    "flood",
    "flood_sized",
)
HOSTILE_KERNELS = 15_000
HOSTILE_GPUS = 10_000
HUGE = 64 * 2**10  # characters of each huge string in a hostile reply
FAKE_NAME = "NVIDIA H900 (says mallory)"
FLOOD = b'{"version":"' + b"9" * 3 * 2**20 + b'","kernels":[]}'  # 3 MiB of version


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


def _compact(reply: dict[str, Any]) -> bytes:
    return json.dumps(reply, separators=(",", ":")).encode()


def hostile_kernels_reply() -> bytes:
    """15,000 kernels: 300 idle holders of 1 TiB each on GPU 0 (all 128 GiB of it, 2,400 times
    over), the first with every string 64 Ki characters long; compact, so that the reply stays
    under what the service reads of it (the cap on rows is what is tried here)."""
    huge = "x" * HUGE
    holder: dict[str, Any] = {
        "gpu_memory": [{"gpu_index": 0, "used_memory_bytes": 2**40}],
        "idle_holding": True,
        "idle_seconds": 1e9,
    }
    kernels = [{"id": huge, "name": huge, "path": huge, "execution_state": huge, **holder}]
    kernels += [{"id": f"m{i}", **holder} for i in range(1, 300)]
    kernels += [{"id": f"m{i}", "gpu_memory": []} for i in range(300, HOSTILE_KERNELS)]
    return _compact({"version": VERSION, "kernels": kernels})


def hostile_telemetry_reply() -> bytes:
    """10,000 GPUs: GPU-0 again with another name and 1 PiB in all, a 64 Ki-character UUID, and
    GPUs nobody else has (indexes 0 to 63 over and over)."""
    gpus: list[dict[str, Any]] = [
        {"index": 0, "uuid": "GPU-0", "name": FAKE_NAME, "memory_used_bytes": 0, "memory_total_bytes": 2**50},
        {"index": 1, "uuid": "y" * HUGE, "memory_used_bytes": 0, "memory_total_bytes": 2**37},
    ]
    gpus += [
        {"index": i % 64, "uuid": f"GPU-m{i}", "memory_used_bytes": 0, "memory_total_bytes": 2**37}
        for i in range(2, HOSTILE_GPUS)
    ]
    return _compact({"version": VERSION, "latest": {"t": 1.0, "gpus": gpus}, "history": []})


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
        if behaviour == "flood":  # streamed, chunk by chunk, without a Content-Length
            await self._stream(FLOOD)
        elif behaviour == "flood_sized":  # with its Content-Length
            self.finish(FLOOD)
        elif behaviour == "long_version":  # 512 Ki characters, within what the service reads
            self.finish(_compact({"version": "9" * 2**19, "kernels": []}))
        elif behaviour == "hostile":
            self.finish(hostile_kernels_reply() if route == "kernels" else hostile_telemetry_reply())
        elif behaviour == "garbage":
            self.finish("<html>Service Unavailable</html>")
        elif behaviour == "wrong_shape":
            self.finish({"version": VERSION, "kernels": [{"id": 7}]})
        else:
            self.finish(kernels_reply(user) if route == "kernels" else telemetry_reply(1.0))

    async def _stream(self, body: bytes) -> None:
        try:
            for start in range(0, len(body), 2**16):
                self.write(body[start : start + 2**16])
                await self.flush()
            self.finish()
        except StreamClosedError:  # the service stopped reading: what it should do
            pass


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
