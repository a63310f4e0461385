"""The student hears before the Hub stops her server: ``POST api/gpu/notices/server-stop`` (what
the Hub's idle-server culler sends) reaches her JupyterLab tabs as an event, is no activity (else
the warning would keep the server alive), is refused without the token, and a bad body gets one
line of JSON, never a traceback. A real jupyter_server with the extension."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.jupyter_api import check_reply
from support.server_events import recorded
from support.waiting import holds, wait_for
from tornado.httpclient import HTTPClientError

from jupyter_gpu.server.notices import EVENT_ID

NOTICE = {
    "stop_in_seconds": 60,
    "reason": "every kernel idle for at least 30 min",
    "by": "the Hub's idle culler",
}
SAID = (
    "Your server will be stopped in 1 min 0 s by the Hub's idle culler: every kernel idle for at "
    "least 30 min. Run a cell to keep it."
)


@pytest.fixture
def told(jp_serverapp: Any) -> list[dict[str, Any]]:
    """The server-stop events, as JupyterLab's event stream gets them."""
    return recorded(jp_serverapp, EVENT_ID)


async def post(jp_fetch: Any, body: bytes | str, **kwargs: Any) -> Any:
    return await jp_fetch(
        "api", "gpu", "notices", "server-stop", method="POST", body=body, follow_redirects=False, **kwargs
    )


async def last_activity(jp_fetch: Any) -> str:
    status = json.loads((await jp_fetch("api", "status", params={"no_track_activity": "1"})).body)
    return status["last_activity"]


async def test_a_notice_reaches_the_tabs_and_is_no_activity(jp_fetch, gpu_monitor, told):
    await jp_fetch("api", "contents")  # some activity to start from
    before = await last_activity(jp_fetch)
    activity_times = dict(gpu_monitor.serverapp.web_app.settings["last_activity_times"])
    response = await post(jp_fetch, json.dumps(NOTICE))
    assert response.code == 200
    reply = json.loads(response.body)
    check_reply("server_stop_notice", reply)
    assert reply == {"version": 1, **NOTICE, "message": SAID}
    # jupyter_events calls its listeners from a task of their own
    await wait_for(holds(lambda: told), 10, what="the server-stop event")
    assert told == [{**NOTICE, "message": SAID}]
    assert await last_activity(jp_fetch) == before
    assert gpu_monitor.serverapp.web_app.settings["last_activity_times"] == activity_times


async def test_long_fields_are_cut_and_made_one_line(jp_fetch, gpu_monitor, told):
    notice = {"stop_in_seconds": 3725.4, "reason": "idle\n" + "x" * 400, "by": "ops\tteam" + "y" * 200}
    reply = json.loads((await post(jp_fetch, json.dumps(notice))).body)
    assert reply["reason"] == ("idle " + "x" * 400)[:300] and len(reply["by"]) == 100
    assert reply["by"].startswith("ops team")
    assert reply["message"].startswith("Your server will be stopped in 1 h 2 min by ops team")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"", "The body must be a JSON object"),
        (b"stop now", "The body must be a JSON object"),
        (b"\xff\xfe{}", "The body must be a JSON object"),
        (b"[60]", "The body must be a JSON object"),
        (b"1" * 5000, "The body must be a JSON object"),
        (b"[" * 100_000, "The body is over 16 KiB"),
        (b'{"stop_in_seconds": 60, "by": "hub"}', "missing: reason"),
        (b'{"stop_in_seconds": 60, "reason": "", "by": "hub", "when": 1}', "unknown field(s): when"),
        (b'{"stop_in_seconds": -1, "reason": "", "by": "hub"}', "`stop_in_seconds` must be a number"),
        (b'{"stop_in_seconds": 86401, "reason": "", "by": "hub"}', "from 0 to 86400"),
        (b'{"stop_in_seconds": NaN, "reason": "", "by": "hub"}', "from 0 to 86400"),
        (b'{"stop_in_seconds": 1e999, "reason": "", "by": "hub"}', "from 0 to 86400"),
        (b'{"stop_in_seconds": true, "reason": "", "by": "hub"}', "from 0 to 86400"),
        (b'{"stop_in_seconds": "60", "reason": "", "by": "hub"}', "from 0 to 86400"),
        (b'{"stop_in_seconds": 60, "reason": 3, "by": "hub"}', "`reason` must be a string; got int"),
        (b'{"stop_in_seconds": 60, "reason": "", "by": null}', "`by` must be a string; got NoneType"),
        (b'{"stop_in_seconds": 60, "reason": "", "by": " \\n "}', "`by` must say who stops the server"),
    ],
    ids=lambda value: value[:30] if isinstance(value, bytes) else None,
)
async def test_a_bad_body_is_refused_in_one_line(jp_fetch, gpu_monitor, told, body, said):
    with pytest.raises(HTTPClientError) as info:
        await post(jp_fetch, body)
    assert info.value.code == 400
    text = info.value.response.body.decode()
    assert "\n" not in text and "Traceback" not in text
    reply = json.loads(text)
    assert said in reply["message"] and len(reply["message"]) < 300, reply
    assert told == []


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_without_the_token_it_is_refused_and_nobody_is_told(jp_fetch, gpu_monitor, told, token):
    # an empty Authorization header stops jp_fetch from adding the real token
    headers = {"Authorization": f"token {token}" if token else ""}
    with pytest.raises(HTTPClientError) as info:
        await post(jp_fetch, json.dumps(NOTICE), headers=headers)
    assert info.value.code == 403
    assert told == []
