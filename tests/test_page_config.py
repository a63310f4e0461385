"""The latest sample in the page's settings (#32): JupyterLab's and Notebook 7's pages carry it in
their jupyter-config-data, for a user who may read api/gpu/, so that the status bar has figures
before its first request; a sampler with nothing to say, or in a state it should never be in,
gives a page without it, never a broken page."""

from __future__ import annotations

import json

import pytest
from support.jupyter_api import DenyGPU, check_reply, page_config, start_extensions, with_server_app
from support.waiting import holds, wait_for

from jupyter_gpu.server.page_config import PAGE_CONFIG_KEY

# jupyter_server_terminals (JupyterLab loads it) registers a websocket route jupyter_server warns of
pytestmark = pytest.mark.filterwarnings("ignore:Extension endpoints without")


@pytest.fixture
def jp_server_config(jp_server_config: dict) -> dict:
    """JupyterLab and Notebook 7 beside the extension, as a user's server has them."""
    return with_server_app(jp_server_config, extensions=("jupyterlab", "notebook"))


async def started(gpu_monitor):
    """The server as `jupyter lab` runs it (its extensions started), with a first sample taken."""
    await start_extensions(gpu_monitor)
    await wait_for(holds(gpu_monitor.sampler.latest), what="the first sample")


@pytest.mark.parametrize("page", [("lab",), ("tree",)], ids=["JupyterLab", "Notebook 7"])
async def test_the_page_carries_the_latest_sample_as_the_telemetry_route_sends_it(
    jp_fetch, gpu_monitor, page
):
    await started(gpu_monitor)
    before = gpu_monitor.sampler.latest()
    config = await page_config(jp_fetch, *page)
    reply = json.loads(config[PAGE_CONFIG_KEY])
    check_reply("telemetry", reply)
    assert reply["state"] == "ok"
    assert reply["history"] == []  # the first poll brings the history, for the charts
    # the newest sample when the page was built, exactly as the sampler encoded it
    held = {s.t: json.loads(s.json_full) for s in gpu_monitor.sampler.since(None)}
    assert reply["latest"]["t"] >= before.t
    assert reply["latest"] == held[reply["latest"]["t"]]
    assert [g["uuid"] for g in reply["latest"]["gpus"]] == [g["uuid"] for g in before.gpus]


async def test_a_hook_already_set_still_runs(jp_fetch, gpu_monitor):
    """JupyterHub's single-user server sets its own hook (the Hub's token in the page): chained."""
    settings = gpu_monitor.serverapp.web_app.settings
    settings["page_config_hook"] = lambda handler, config: {**config, "hubUser": "alice"}
    await started(gpu_monitor)
    config = await page_config(jp_fetch, "lab")
    assert config["hubUser"] == "alice"
    assert json.loads(config[PAGE_CONFIG_KEY])["latest"] is not None


class Broken:
    """A latest sample in a state the sampler never leaves it: not a Sample at all."""


@pytest.mark.parametrize(
    ("latest", "why"),
    [(lambda: None, "no sample yet"), (Broken, "a sample that is not one"), (1 / 1, "not callable")],
)
async def test_a_sampler_with_nothing_or_nonsense_to_say_gives_a_page_without_it(
    jp_fetch, gpu_monitor, monkeypatch, latest, why
):
    await started(gpu_monitor)
    warned: list[str] = []
    monkeypatch.setattr(gpu_monitor.log, "warning", lambda message, *args, **kwargs: warned.append(message))
    monkeypatch.setattr(gpu_monitor.sampler, "latest", latest)
    config = await page_config(jp_fetch, "lab")
    assert PAGE_CONFIG_KEY not in config, why
    assert config["appName"] == "JupyterLab"  # the page itself as ever
    # nonsense is worth a warning in the server's log; no sample yet is not
    assert warned == ([] if why == "no sample yet" else ["jupyter_gpu: no telemetry in the page's settings"])


class TestAUserWhoMayNotReadTheGpus:
    @pytest.fixture
    def jp_server_config(self, jp_server_config):
        return with_server_app(jp_server_config, authorizer=DenyGPU)

    async def test_gets_the_page_without_them(self, jp_fetch, gpu_monitor):
        await started(gpu_monitor)
        config = await page_config(jp_fetch, "lab")
        assert PAGE_CONFIG_KEY not in config
        assert config["appName"] == "JupyterLab"
