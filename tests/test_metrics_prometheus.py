"""A real Prometheus (Debian's `prometheus` package) scrapes a real jupyter_server replaying H200
readings, with a real kernel whose agent publishes allocator figures, and loads the package's
recording rules. Its HTTP API then answers what operators' dashboards ask: memory per notebook,
DCGM-named series in DCGM's units (what Grafana dashboard 12239 queries), a counter's rate(),
and every query of the package's own dashboard. promtool checks the exposition and the rules.

Without prometheus this skips, except where JUPYTER_GPU_REQUIRE_PROMETHEUS=1 (CI): there it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from support.fake_torch import FAKE_TORCH_THEN_LOAD
from support.jupyter_api import get, start_notebook_kernel
from support.kernel_client import run_cell
from support.stats_files import fixture_device, publish, stats_doc
from support.waiting import wait_for
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_gpu.monitoring import DASHBOARD, RULES

GIB = 1024**3
MIB = 1024**2
UUID0 = "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5"
NOTEBOOK = "course/week1.ipynb"
# What Grafana dashboard 12239 (NVIDIA's dcgm-exporter-dashboard.json) asks Prometheus, with its
# variables $Hostname and $gpu set to "All"; its profiling panels (tensor cores) from GPM.
DCGM_DASHBOARD_QUERIES = [
    f'max({name}{{Hostname=~".*", gpu=~".*"}}) by (Hostname, gpu, {by})'
    for name, by in (
        ("DCGM_FI_DEV_GPU_TEMP", "uuid"),
        ("DCGM_FI_DEV_POWER_USAGE", "uuid"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "GPU_I_ID, GPU_I_PROFILE"),
        ("DCGM_FI_DEV_FB_USED", "GPU_I_ID, GPU_I_PROFILE"),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "UUID"),
        ("DCGM_FI_PROF_SM_ACTIVE", "UUID"),
    )
] + [
    'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~".*", gpu=~".*"})',
    'sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~".*", gpu=~".*"}) by (gpu))',
    'max(DCGM_FI_DEV_SM_CLOCK{Hostname=~".*", gpu=~".*"} * 1000000) by (Hostname, UUID, gpu)',
]


def _missing(why: str) -> None:
    if os.environ.get("JUPYTER_GPU_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture
def prometheus_tools() -> tuple[str, str]:
    found = [shutil.which(os.environ.get(f"{name.upper()}_BIN", name)) for name in ("prometheus", "promtool")]
    if not all(found):
        _missing("prometheus and promtool are not installed (apt-get install -y prometheus)")
    return found[0], found[1]  # type: ignore[return-value]


@pytest.fixture
def jp_base_url(monkeypatch) -> str:
    """A JupyterHub user's server, started as the Hub's spawner does: her name in the environment."""
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    return "/user/alice/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(prometheus_tools, tmp_path, jp_http_port, jp_serverapp, jp_base_url):
    """A prometheus on a free loopback port scraping the test server every second, as the
    README's scrape config does (token file; the user label comes from the server)."""
    token = tmp_path / "token"
    token.write_text(jp_serverapp.identity_provider.token)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "jupyter_gpu",
                "metrics_path": f"{jp_base_url}metrics",
                "authorization": {"credentials_file": str(token)},
                "static_configs": [{"targets": [f"127.0.0.1:{jp_http_port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prometheus_tools[0],
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield f"http://127.0.0.1:{port}", tmp_path / "prometheus.log"
    process.terminate()
    process.wait(10)
    log.close()


async def api(url: str, path: str, **params) -> dict | None:
    """Prometheus's answer to one API call, or None while it is not up yet."""
    try:
        response = await AsyncHTTPClient().fetch(f"{url}{path}?{urllib.parse.urlencode(params, doseq=True)}")
    except (ConnectionError, HTTPClientError) as error:
        if isinstance(error, HTTPClientError) and error.code == 400:
            raise AssertionError(f"Prometheus refused {params}: {error.response.body.decode()}") from None
        return None
    return json.loads(response.body)


async def eventually(url: str, expr: str, timeout: float = 30.0) -> list[dict]:
    """The instant query's result once it has one (rules and rate() need a few scrapes)."""

    async def answered():
        body = await api(url, "/api/v1/query", query=expr)
        return body and body["data"]["result"]

    answered.__name__ = f"Prometheus to answer {expr}"
    return await wait_for(answered, timeout=timeout)


def one(result: list[dict]) -> tuple[dict, float]:
    (row,) = result
    return row["metric"], float(row["value"][1])


async def test_a_real_prometheus_gets_what_operators_chart(jp_fetch, gpu_monitor, prometheus, kernel_env):
    url, log = prometheus
    kernel_id = await start_notebook_kernel(jp_fetch, NOTEBOOK)
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    processes = gpu_monitor.simulated_nvml.readings["devices"][0]["compute_processes"]
    processes.append({"pid": kernel.provisioner.pid, "used_gpu_memory": 4 * GIB})
    await run_cell(kernel, FAKE_TORCH_THEN_LOAD)

    async def published():
        body = await get(jp_fetch, "kernels")  # also refreshes what /metrics reports
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        return mine if mine["allocator_state"] == "ok" and mine["gpu_memory"] else None

    mine = await wait_for(published, timeout=20)
    device = mine["allocator"]["devices"][0]

    # per notebook, with the user the JupyterHub server labels its series with
    labels, value = one(
        await eventually(url, f'jupyter_gpu_kernel_memory_used_bytes{{notebook_path="{NOTEBOOK}"}}')
    )
    assert value == 4 * GIB
    assert labels["user"] == "alice" and labels["kernel_id"] == kernel_id and labels["uuid"] == UUID0
    _, value = one(
        await eventually(url, f'jupyter_gpu_kernel_allocator_fragmentation_ratio{{kernel_id="{kernel_id}"}}')
    )
    assert value == pytest.approx(device["fragmentation"])

    # the recording rules: DCGM's names, units and labels
    labels, value = one(await eventually(url, 'DCGM_FI_DEV_FB_USED{gpu="0"}'))
    assert value == pytest.approx(3222077440 / MIB)  # MiB
    assert labels["UUID"] == UUID0 and labels["modelName"] == "NVIDIA H200" and labels["device"] == "nvidia0"
    assert labels["Hostname"] == "127.0.0.1" and labels["DCGM_FI_DRIVER_VERSION"] == "580.159.04"
    assert labels["pci_bus_id"] == "00000000:00:06.0" and labels["user"] == "alice"
    expected = {
        "DCGM_FI_DEV_POWER_USAGE": 123.82,  # W
        "DCGM_FI_DEV_SM_CLOCK": 1980,  # MHz
        "DCGM_FI_DEV_MEM_CLOCK": 3201,
        "DCGM_FI_DEV_GPU_TEMP": 38,  # C
        "DCGM_FI_DEV_MEMORY_TEMP": 40,
        "DCGM_FI_DEV_GPU_UTIL": 0,  # %
        "DCGM_FI_DEV_FB_TOTAL": 150754820096 / MIB,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_PROF_SM_ACTIVE": 0,  # ratio, from GPM: the capture is of an idle H200
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": 0,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 458 * 1024,  # bytes/s, from GPM here
    }
    for name, want in expected.items():
        _, value = one(await eventually(url, f'{name}{{gpu="0"}}'))
        assert value == pytest.approx(want), name
    _, mask = one(await eventually(url, 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1"}'))
    assert mask == 1  # nvmlClocksEventReasonGpuIdle, as nvidia-smi -q showed it
    retired = await api(url, "/api/v1/query", query="DCGM_FI_DEV_RETIRED_SBE")
    assert retired and retired["data"]["result"] == []  # an H200 has no retired pages: absent, not 0

    # a counter's rate(): the energy counter's rate is the power the GPU drew (once the window
    # is full: over fewer scrapes, rate() extrapolates less than the window)
    await eventually(url, 'count_over_time(jupyter_gpu_energy_joules_total{gpu="0"}[5s]) >= 5')
    _, watts = one(await eventually(url, 'rate(jupyter_gpu_energy_joules_total{gpu="0"}[5s])'))
    assert watts == pytest.approx(123.82, rel=0.1)
    _, value = one(
        await eventually(url, f'rate(jupyter_gpu_kernel_allocator_ooms_total{{kernel_id="{kernel_id}"}}[5s])')
    )
    assert value == 0

    # Grafana dashboard 12239 unchanged: its variables and its panels' queries have data
    hosts = await api(url, "/api/v1/label/Hostname/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
    assert hosts and hosts["data"] == ["127.0.0.1"]
    for expr in DCGM_DASHBOARD_QUERIES:
        assert len(await eventually(url, expr)) >= 1, expr

    # the package's own dashboard: every query parses and has data, every series it names exists
    dashboard = json.loads(DASHBOARD.read_text())
    names: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r"\$(instance|user|gpu)\b", ".*", target["expr"]).replace("$__rate_interval", "5s")
            names.update(re.findall(r"\b(jupyter_gpu_\w+)\b", expr))
            assert await eventually(url, expr), f"{panel['title']}: {expr}"
    for variable in dashboard["templating"]["list"][1:]:
        names.update(re.findall(r"\b(jupyter_gpu_\w+)\b", variable["query"]["query"]))
    for name in sorted(names):
        assert await eventually(url, name), f"the dashboard uses {name}, which Prometheus does not have"
    rules = await api(url, "/api/v1/rules")
    assert rules
    unhealthy = [
        (r["name"], r.get("lastError"))
        for g in rules["data"]["groups"]
        for r in g["rules"]
        if r["health"] != "ok"
    ]
    assert unhealthy == [], log.read_text()


async def test_promtool_accepts_the_exposition_and_the_rules(jp_fetch, gpu_monitor, prometheus_tools):
    kernel_id = await start_notebook_kernel(jp_fetch, NOTEBOOK)
    publish(gpu_monitor, kernel_id, stats_doc(gpu_monitor, kernel_id, [fixture_device()]))

    async def with_kernel_series():
        await get(jp_fetch, "kernels")
        text = (await jp_fetch("metrics")).body.decode()
        return text if "jupyter_gpu_kernel_allocator_ooms_total{" in text and "energy" in text else None

    text = await wait_for(with_kernel_series)
    # jupyter_server's own series are not ours to lint (it types kernel_currently_running_total
    # as a gauge, which promtool rejects): only the jupyter_gpu_ families, HELP and TYPE included
    ours = "".join(
        line + "\n" for line in text.splitlines() if re.match(r"(# (HELP|TYPE) )?jupyter_gpu_", line)
    )
    promtool = prometheus_tools[1]
    checked = subprocess.run([promtool, "check", "metrics"], input=ours, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert rules.returncode == 0 and "SUCCESS: 39 rules found" in rules.stdout, rules.stdout + rules.stderr


@pytest.mark.parametrize(
    "unit", ["prometheus_rules_test.yml", "prometheus_rules_mig_test.yml", "prometheus_rules_gpm_test.yml"]
)
def test_the_rules_pass_promtools_unit_tests(prometheus_tools, unit):
    """promtool's rule unit tests: an idle kernel holding 38 GiB alerts after 5 minutes; one
    holding 512 MiB, or one that ran a cell a minute ago, does not. A MIG device's memory comes
    out under its GPU's DCGM labels, told apart by GPU_I_ID and GPU_I_PROFILE, as dcgm-exporter's.
    GPM's SM and tensor-core figures come out as DCGM's profiling fields, in its units."""
    unit = Path(__file__).parent / "fixtures" / unit
    done = subprocess.run([prometheus_tools[1], "test", "rules", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
