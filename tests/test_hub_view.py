"""The instructor view's pure shaping and its fan-out over many user servers (no Hub needed)."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.fake_fleet import FakeFleet, kernels_reply, mixed, telemetry_reply

from jupyter_gpu.client import Server
from jupyter_gpu.hub import replies, view
from jupyter_gpu.hub.fleet import Hub
from jupyter_gpu.hub.handlers import Builder

ADA = view.UserServer("ada", "", "/user/ada/")


def test_idle_holders_come_first_biggest_first_and_missing_idle_fields_show_a_dash():
    reply = kernels_reply("ada", 3)  # kernel 1 is the idle holder (2 GiB)
    del reply["kernels"][2]["idle_seconds"], reply["kernels"][2]["idle_holding"]  # an older server
    reading = view.Reading(
        ADA, "ok", kernels=replies.check_kernels(reply), gpus=replies.check_telemetry(telemetry_reply(1))
    )
    built = view.build([reading], now=10.0, timeout=1.5)
    assert [k["kernel_id"] for k in built["kernels"]] == ["ada-k1", "ada-k2", "ada-k0"]
    older = built["kernels"][1]
    assert older["idle_holding"] is None and older["text"]["idle"] == view.DASH
    assert built["kernels"][0]["text"]["memory"] == "2.00 GiB"
    assert built["kernels"][0]["text"]["idle"] == "20 min"  # 1200 s, said as the panel says it


def test_a_quota_and_assignment_are_believed_only_as_far_as_the_servers_memory():
    reply = kernels_reply("ada", 2)
    for kernel in reply["kernels"]:
        kernel.update(memory_limit_bytes=4 * 1024**3, assigned_gpus=["GPU-aaaa"])
    telemetry = replies.check_telemetry(telemetry_reply(1))
    reading = view.Reading(ADA, "ok", kernels=replies.check_kernels(reply), gpus=telemetry)
    node = [{k: g[k] for k in ("index", "uuid", "memory_total_bytes")} for g in telemetry.rows]
    read_here = view.build([reading], now=10.0, timeout=1.5, node=node)["kernels"][0]["text"]
    assert (read_here["limit"], read_here["assigned"]) == ("4.00 GiB", "GPU-aaaa")
    # no GPU the Hub node reads, and no second user, backs ada's word: her quota is only a claim
    alone = view.build([reading], now=10.0, timeout=1.5)["kernels"][0]["text"]
    assert (alone["limit"], alone["assigned"]) == ("4.00 GiB (unconfirmed)", "GPU-aaaa (unconfirmed)")


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ([], "not a JSON object"),
        ({"version": 99, "kernels": []}, "version 99"),
        ({"version": 1, "kernels": [{"id": 7}]}, "no id"),
        (
            {
                "version": 1,
                "kernels": [{"id": "k", "gpu_memory": [{"gpu_index": -1, "used_memory_bytes": 1}]}],
            },
            "gpu_memory",
        ),
        ({"version": 1, "kernels": [{"id": "k", "gpu_memory": [], "idle_holding": 1}]}, "idle_holding"),
        ({"version": 1, "kernels": [{"id": "k", "gpu_memory": [], "idle_seconds": "long"}]}, "idle_seconds"),
        # out of bounds, as json.loads reads a hostile server's reply
        pytest.param(
            {
                "version": 1,
                "kernels": [{"id": "k", "gpu_memory": [{"gpu_index": 0, "used_memory_bytes": 10**400}]}],
            },
            "gpu_memory",
            id="used-10**400",
        ),
        (
            {
                "version": 1,
                "kernels": [{"id": "k", "gpu_memory": [{"gpu_index": True, "used_memory_bytes": 1}]}],
            },
            "gpu_memory",
        ),
        (
            {"version": 1, "kernels": [{"id": "k", "gpu_memory": [], "idle_seconds": float("inf")}]},
            "idle_seconds",
        ),
        (
            {"version": 1, "kernels": [{"id": "k", "gpu_memory": [], "last_activity": float("nan")}]},
            "last_activity",
        ),
    ],
)
def test_a_reply_of_the_wrong_shape_is_refused_with_what_is_wrong(reply, says):
    with pytest.raises(replies.BadReply, match=says):
        replies.check_kernels(reply)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("t", float("inf"), "not a sample"),
        ("index", 2**53 + 1, "without an index"),
        ("memory_used_bytes", 10**400, "memory_used_bytes"),
        ("memory_total_bytes", -1, "memory_total_bytes"),
    ],
    ids=["t-inf", "index-2**53+1", "used-10**400", "total-negative"],
)
def test_a_telemetry_reply_out_of_bounds_is_refused(field, value, says):
    reply = telemetry_reply(1.0)
    if field == "t":
        reply["latest"]["t"] = value
    else:
        reply["latest"]["gpus"][0][field] = value
    with pytest.raises(replies.BadReply, match=says):
        replies.check_telemetry(reply)


def test_gpus_seen_by_several_servers_are_listed_once_and_no_student_can_hide_a_full_one():
    honest = replies.check_telemetry(telemetry_reply(1.0))
    liar = replies.check_telemetry(telemetry_reply(1e300))  # "my sample is the newest"
    liar.rows[0]["memory_used_bytes"] = 0  # "GPU 0 is empty"
    readings = [
        view.Reading(ADA, "ok", kernels=[], gpus=honest),
        view.Reading(view.UserServer("mallory", "", "/user/mallory/"), "ok", kernels=[], gpus=liar),
    ]
    gpus = view.gpu_rows(readings, now=1000.0)
    assert [(g["index"], g["memory_used_bytes"], g["users"]) for g in gpus] == [
        (0, 2**33, ["ada", "mallory"]),
        (1, 2**33, ["ada", "mallory"]),
    ]
    assert all(g["sampled_at"] <= 1000.0 for g in gpus)


def test_a_hundred_servers_some_slow_some_dead_each_get_their_state():
    """How long a page takes is measured by benchmarks/hub_page.py; here, what it shows."""

    async def build():
        fleet = FakeFleet(mixed(100))
        await fleet.start()
        try:
            # a timeout well above the slow servers' 0.5 s: on a loaded machine the fake fleet,
            # serving all hundred on this one event loop, is slower than real servers
            hub = Hub(Server(f"{fleet.url}/hub/api/", "t"), fleet.url, timeout=3.0)
            return await Builder(hub).build()
        finally:
            fleet.stop()

    built = asyncio.run(build())
    states = {s["user"]: (s["state"], s["reason"]) for s in built["servers"]}
    assert states["student099"][0] == "not_answering"  # closed the connection
    assert states["student096"][0] == "not_answering"  # hung: the timeout
    assert states["student097"][0] == "error" and "JSON" in states["student097"][1]
    assert states["student098"] == ("error", "unexpected reply: kernel 0 has no id")
    assert states["student005"][0] == "ok"  # slow but within the timeout
    assert sum(s == "ok" for s, _ in states.values()) == 96
    assert len(built["kernels"]) == 96 * 2 and built["kernels"][0]["idle_holding"] is True
    assert [s["state"] for s in built["servers"][:4]] != ["ok"] * 4  # problems first


def test_a_students_server_never_sees_the_services_token():
    """Her server runs her code, so it sees every request it gets: the service's own token
    (which reaches every server of the Hub) must never be one of them."""

    async def two_builds():
        fleet = FakeFleet({"alice": "ok", "mallory": "ok"})
        await fleet.start()
        try:
            hub = Hub(Server(f"{fleet.url}/hub/api/", "SERVICE-TOKEN"), fleet.url, timeout=1.0)
            await Builder(hub).build()
            await Builder(hub).build()
            del fleet.behaviour["alice"]  # alice's server stops
            await Builder(hub).build()
            return fleet
        finally:
            fleet.stop()

    fleet = asyncio.run(two_builds())
    n = {user: k for k, (user, _) in enumerate(fleet.minted)}  # the fleet numbers tokens as minted
    assert fleet.seen_tokens == {u: {f"token tok-{u}-{n[u]}"} for u in ("alice", "mallory")}
    assert sorted(fleet.minted) == [  # one each, reused by the second build
        ("alice", ["access:servers!server=alice/"]),
        ("mallory", ["access:servers!server=mallory/"]),
    ]
    assert fleet.revoked == [("alice", f"a{n['alice']}")]  # gone with her server


def test_a_terminals_reply_gives_the_newest_activity_or_is_refused():
    now = 1_800_001_000.0
    stamp = "2027-01-15T08:00:00.000000Z"  # now - 1,000 s
    naive = "2027-01-15T08:00:00"  # no zone: UTC, as jupyter_server means it
    listed = [{"name": str(i), "last_activity": stamp} for i in range(3)]
    assert replies.terminals_idle_seconds(json.dumps(listed).encode(), now) == 1000.0
    assert replies.terminals_idle_seconds(json.dumps([{"last_activity": naive}]).encode(), now) == 1000.0
    assert replies.terminals_idle_seconds(b"[]", now) is None  # no terminal
    future = [{"name": "1", "last_activity": "2099-01-01T00:00:00Z"}]
    assert replies.terminals_idle_seconds(json.dumps(future).encode(), now) == 0.0
    for body, says in [
        (b"{", "not JSON"),
        (b'{"name": "1"}', "not a list"),
        (b'[{"name": "1", "last_activity": "yesterday"}]', "readable `last_activity`"),
        (b'[{"name": "1", "last_activity": 5}]', "readable `last_activity`"),
        (b"[" * 100_000, "not JSON"),
    ]:
        with pytest.raises(replies.BadReply, match=says):
            replies.terminals_idle_seconds(body, now)
