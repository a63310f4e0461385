"""The instructor's page next to hostile student servers: what a student's own code can make her
server answer the service (15,000 kernels, 10,000 GPUs, strings of 64 Ki characters, a GPU with
another name and total, a 3 MiB version), and what of it reaches the page. No Hub needed: the
fake fleet (tests/support/fake_fleet.py) answers as the servers and the Hub."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fake_fleet import (
    FAKE_NAME,
    HOSTILE_GPUS,
    HOSTILE_KERNELS,
    FakeFleet,
    kernels_reply,
    telemetry_reply,
)

from jupyter_gpu.analysis.units import format_bytes
from jupyter_gpu.client import Server
from jupyter_gpu.hub import replies, view
from jupyter_gpu.hub.fleet import MAX_KERNELS_REPLY, Hub, node_gpus
from jupyter_gpu.hub.handlers import Builder
from jupyter_gpu.nvml.simulated import SimulatedNVML

HONEST = ("alice", "bob", "carol")
READINGS = Path(__file__).parent / "fixtures" / "nvml_readings_2gpu.json"
# What the page may grow by for one hostile server: 256 kernel rows of at most ~900 bytes as JSON
# (id 128, path 256, name 64 and state 32 characters, the figures and their text) and 64 GPU rows
# of ~350 (the 6 MB it grew by before the cap).
PAGE_LIMIT = 256 * 1024


def build(behaviour: dict[str, str], node: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        fleet = FakeFleet(behaviour)
        await fleet.start()
        try:
            # a generous timeout: the fake fleet serves every reply from this one busy loop
            hub = Hub(Server(f"{fleet.url}/hub/api/", "t"), fleet.url, timeout=20.0)
            return await Builder(hub, node or []).build()
        finally:
            fleet.stop()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def page() -> dict[str, Any]:
    return build(
        {
            **{user: "ok" for user in HONEST},
            "mallory": "hostile",
            "trudy": "long_version",
            "oscar": "flood",
            "olga": "flood_sized",
        }
    )


def server(page: dict[str, Any], user: str) -> dict[str, Any]:
    return next(s for s in page["servers"] if s["user"] == user)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_fake_kernels_do_not_push_the_honest_students_off_the_top(page):
    honest = [k for k in page["kernels"] if k["user"] in HONEST]
    assert len(honest) == 2 * len(HONEST)  # every real kernel is listed ...
    assert page["kernels"][: len(honest)] == honest  # ... and above every fake one
    assert honest[0]["idle_holding"] is True and all(k["memory_confirmed"] for k in honest)
    fakes = page["kernels"][len(honest) :]
    assert {k["user"] for k in fakes} == {"mallory"}
    assert len(fakes) == replies.MAX_KERNELS and not any(k["memory_confirmed"] for k in fakes)
    mallory = server(page, "mallory")
    assert mallory["kernels"] == HOSTILE_KERNELS
    assert f"{HOSTILE_KERNELS:,} kernels: the first {replies.MAX_KERNELS} are listed" in mallory["notes"]
    assert any("listed last" in note for note in mallory["notes"])


def test_the_page_reply_stays_small(page):
    size = len(json.dumps(page).encode())
    honest_only = len(json.dumps(build({user: "ok" for user in HONEST})).encode())
    assert size - honest_only < PAGE_LIMIT, (size, honest_only)


def test_every_string_from_a_reply_is_cut(page):
    longest = max(strings(page), key=len)
    assert len(longest) <= view.MAX_REASON, longest[:80]
    (huge,) = [k for k in page["kernels"] if k["kernel_id"].startswith("xxx")]
    for field, limit in (("kernel_id", "id"), ("kernel_name", "name"), ("notebook", "path")):
        assert len(huge[field]) == replies.TEXT_LIMITS[limit] and huge[field].endswith("\u2026")
    assert len(huge["execution_state"]) == replies.TEXT_LIMITS["execution_state"]
    assert any(len(g["uuid"]) == replies.TEXT_LIMITS["uuid"] for g in page["gpus"])


def test_a_gpu_one_server_alone_describes_is_marked_as_its_claim(page):
    confirmed = [g for g in page["gpus"] if g["confirmed"]]
    assert [(g["uuid"], g["memory_total_bytes"], g["users"]) for g in confirmed] == [
        ("GPU-0", 2**37, list(HONEST)),
        ("GPU-1", 2**37, list(HONEST)),
    ]
    assert page["gpus"][:2] == confirmed  # the real GPUs first
    claimed = page["gpus"][2:]
    assert len(claimed) == replies.MAX_GPUS  # of the 10,000 she sent
    assert all(g["text"]["seen_by"] == "claimed by mallory alone" for g in claimed)
    other_gpu0 = next(g for g in claimed if g["uuid"] == "GPU-0")
    assert other_gpu0["memory_total_bytes"] == 2**50 and other_gpu0["name"] is None
    assert FAKE_NAME not in json.dumps(page)
    assert f"{HOSTILE_GPUS:,} GPUs: the first {replies.MAX_GPUS} are read" in server(page, "mallory")["notes"]


def test_a_huge_version_is_not_copied_into_the_reason(page):
    trudy = server(page, "trudy")  # 512 Ki characters of version, within what is read
    assert trudy["state"] == "error" and len(trudy["reason"]) < 200
    assert "has version '999999" in trudy["reason"] and "\u2026" in trudy["reason"]
    for user in ("oscar", "olga"):  # 3 MiB, streamed or sized: the service stops reading at 1 MiB
        assert server(page, user)["state"] == "error"
        assert server(page, user)["reason"].endswith(
            f"sent more than {format_bytes(MAX_KERNELS_REPLY)}: refused"
        )


def test_a_3_mib_version_makes_a_short_message():
    with pytest.raises(replies.BadReply) as error:
        replies.check_kernels({"version": "9" * 3 * 2**20, "kernels": []})
    assert len(str(error.value)) < 100 and "this service reads version 1" in str(error.value)


def test_a_server_with_too_many_gpus_in_one_kernel_is_an_error_row():
    reply = kernels_reply("mallory", 1)
    reply["kernels"][0]["gpu_memory"] *= replies.MAX_GPUS + 1
    with pytest.raises(replies.BadReply, match="at most 64"):
        replies.check_kernels(reply)


def test_the_hub_nodes_own_reading_is_what_claims_are_held_to():
    """Two students who agree on a GPU's total against what the Hub node reads do not make it so;
    a GPU only one honest student reports is confirmed by the Hub node's reading."""
    node = node_gpus(SimulatedNVML.from_file(READINGS))
    uuid, total = node[0]["uuid"], node[0]["memory_total_bytes"]

    def reading(user: str, gpu_total: int, used: int) -> view.Reading:
        telemetry = telemetry_reply(1.0)
        telemetry["latest"]["gpus"] = [{"index": 0, "uuid": uuid, "memory_total_bytes": gpu_total}]
        kernels = kernels_reply(user, 1)
        kernels["kernels"][0]["gpu_memory"][0]["used_memory_bytes"] = used
        return view.Reading(
            view.UserServer(user, "", f"/user/{user}/"),
            "ok",
            kernels=replies.check_kernels(kernels),
            gpus=replies.check_telemetry(telemetry),
        )

    readings = [
        reading("alice", total, 2**30),
        reading("mallory", 2**50, 2**45),
        reading("eve", 2**50, 2**45),
    ]
    built = view.build(readings, now=10.0, timeout=1.0, node=node)
    assert [(g["memory_total_bytes"], g["confirmed"], g["users"]) for g in built["gpus"]] == [
        (total, True, ["alice"]),
        (2**50, False, ["eve", "mallory"]),
    ]
    assert built["gpus"][0]["name"] == "NVIDIA H200"  # the Hub node's word, not a server's
    assert [(k["user"], k["memory_confirmed"]) for k in built["kernels"]] == [
        ("alice", True),
        ("eve", False),
        ("mallory", False),
    ]


def test_an_error_that_quotes_a_students_server_keeps_its_percent_signs():
    """Tornado doubles every ``%`` of an HTTPError's message (a format string to it); the
    instructor must read what the student's server said, not "100%% full"."""
    from tornado import httpclient, httpserver, netutil, web

    from jupyter_gpu.hub.handlers import APIHandler

    class Relay(APIHandler):
        def get(self) -> None:
            raise web.HTTPError(502, "her server answered: the disk is 100% full")

    async def fetch() -> tuple[int, dict[str, Any]]:
        app = web.Application([(r"/relay", Relay, {"hub": None, "builder": None})], cookie_secret="s")
        sockets = netutil.bind_sockets(0, "127.0.0.1")
        server = httpserver.HTTPServer(app)
        server.add_sockets(sockets)
        try:
            url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/relay"
            reply = await httpclient.AsyncHTTPClient().fetch(url, raise_error=False)
            return reply.code, json.loads(reply.body)
        finally:
            server.stop()

    assert asyncio.run(fetch()) == (
        502,
        {"status": 502, "message": "her server answered: the disk is 100% full"},
    )
