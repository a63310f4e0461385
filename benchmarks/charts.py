"""Benchmark the charts in chromium: frame times with 8 GPUs and a 60-minute window, and requests.

    python benchmarks/charts.py [--gpus 8] [--minutes 60] [--seconds 30]

Starts `jupyter lab` with jupyter_gpu (simulated backend) and answers the page's telemetry
requests with a history of ``--gpus`` GPUs over ``--minutes`` at one sample a second, made by
replaying the packaged H200 trace (jupyter_gpu/nvml/h200_trace.json) round-robin onto
every GPU; each later poll gets one new sample. With the GPU panel and the GPU Dashboard (60 min
window) open side by side, it records for ``--seconds``:
- every frame's duration (requestAnimationFrame to requestAnimationFrame): p50 / p95 / max;
- the long tasks (over 50 ms) the browser reports (PerformanceObserver 'longtask');
  a poll's reply (every 2 s) redraws every chart within one frame, so the longest frames are
  the updates;
- requests per minute to api/gpu/ (the panel and dashboard share one poll).
With ``--profile``, a further ``--seconds`` under chromium's CPU profiler: the main thread's
busy time per poll, and how much of it is jupyter_gpu's code and uPlot's. Frame times on a
loaded machine swing with what else runs; this is the cost of the redraw itself.
Needs the test extra (playwright) and a built labextension, like the browser tests.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))  # the browser tests' server and page helpers (tests/support/)

from support.browser import CHROMIUM, CHROMIUM_ARGS, LabServer, open_gpu_panel, open_lab  # noqa: E402

TRACE = json.loads((ROOT / "jupyter_gpu" / "nvml" / "h200_trace.json").read_text())
FRAMES_PROBE = """() => { window.__frames = []; window.__long = [];
  let last = performance.now();
  const tick = now => { window.__frames.push(now - last); last = now; requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  new PerformanceObserver(l => l.getEntries().forEach(e => window.__long.push(e.duration)))
    .observe({ type: 'longtask', buffered: false }); }"""


def gpu_sample(index: int, frame: dict, uuid: str) -> dict:
    mem = frame["memory_v2"]
    return {
        "index": index,
        "uuid": uuid,
        "state": "ok",
        "error": None,
        "memory_used_bytes": mem["used"],
        "memory_reserved_bytes": mem["reserved"],
        "memory_free_bytes": mem["free"],
        "memory_total_bytes": mem["total"],
        "utilization_gpu_percent": frame["utilization"]["gpu"],
        "utilization_memory_percent": frame["utilization"]["memory"],
        "temperature_celsius": frame["temperature_c"],
        "power_watts": frame["power_mw"] / 1000,
        "power_limit_watts": 700.0,
        "clock_sm_mhz": frame["clock_sm_mhz"],
        "clock_mem_mhz": frame["clock_mem_mhz"],
        "fan_speed_percent": None,
        "pcie_rx_bytes_per_second": frame["pcie_rx_kbs"] * 1024,
        "pcie_tx_bytes_per_second": frame["pcie_tx_kbs"] * 1024,
        "memory_temperature_celsius": frame["temperature_c"] + 2,
        "processes": [
            {"pid": p["pid"] + 100 * index, "used_memory_bytes": p["used_gpu_memory"]}
            for p in frame["compute_processes"]
        ],
        "unsupported": {"fan_speed_percent": "not supported on this GPU"},
    }


class Feed:
    """The telemetry and devices replies for ``gpus`` GPUs, one new sample per poll."""

    def __init__(self, gpus: int, minutes: float) -> None:
        self.gpus = gpus
        self.uuids = [f"GPU-bench-{i:04d}" for i in range(gpus)]
        self.start = time.time() - minutes * 60
        self.n = int(minutes * 60)

    def sample(self, i: int) -> dict:
        frames = TRACE["trace"]["frames"]
        frame = frames[i % len(frames)]
        return {
            "t": self.start + i,
            "gpus": [gpu_sample(g, frame[g % len(frame)], self.uuids[g]) for g in range(self.gpus)],
        }

    def telemetry(self, since: float | None) -> str:
        if since is None:
            history = [self.sample(i) for i in range(self.n)]
        else:
            self.n += 1
            history = [self.sample(self.n - 1)]
        owners = [
            {"pid": 2005 + 100 * g, "kernel_id": f"k{g}", "name": "python3", "path": f"train_gpu{g}.ipynb"}
            for g in range(self.gpus)
        ]
        return json.dumps(
            {
                "version": 1,
                "available": True,
                "state": "ok",
                "problem": None,
                "reason": None,
                "simulated": True,
                "interval": 1.0,
                "now": history[-1]["t"],
                "owners": owners,
                "latest": history[-1],
                "history": history,
            }
        )

    def devices(self) -> str:
        device = {
            "name": "NVIDIA H200",
            "pci_bus_id": "00000000:00:06.0",
            "memory_total_bytes": 150754820096,
            "power_limit_watts": 700.0,
            "mig_mode": {"current": False, "pending": False},
            "unsupported": {},
        }
        return json.dumps(
            {
                "version": 1,
                "available": True,
                "state": "ok",
                "problem": None,
                "reason": None,
                "simulated": True,
                "driver_version": "580.159.04",
                "cuda_driver_version": "13.0",
                "devices": [{**device, "index": g, "uuid": u} for g, u in enumerate(self.uuids)],
            }
        )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def profile_per_poll(profile: dict, polls: int) -> str:
    """A CPU profile's main-thread time per poll: busy, in jupyter_gpu's bundle, in uPlot's."""
    frames = {n["id"]: n["callFrame"] for n in profile["nodes"]}
    spent: collections.Counter[str] = collections.Counter()
    # timeDeltas[i] is the time before sample i: sample i ran until the next one
    for node, after in zip(profile["samples"], profile["timeDeltas"][1:] + [0]):
        frame = frames[node]
        url = frame["url"]
        if frame["functionName"] == "(idle)":
            spent["idle"] += after
        elif "/jupyter-gpu/static/" in url:
            spent["uPlot" if "uplot" in url else "jupyter_gpu"] += after
        else:
            spent["other"] += after
    busy = sum(spent.values()) - spent["idle"]
    per = max(polls, 1) * 1000  # microseconds to ms per poll
    return (
        f"main thread per poll ({polls} polls, CPU profile): busy {busy / per:.1f} ms, "
        f"jupyter_gpu {spent['jupyter_gpu'] / per:.1f} ms, uPlot {spent['uPlot'] / per:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--profile", action="store_true", help="also profile the main thread")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    feed = Feed(args.gpus, args.minutes)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        lab = LabServer(Path(tmp))
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1920, "height": 1080}).new_page()
            requests: list[tuple[float, str]] = []

            def telemetry(route, request) -> None:
                since = "since=" in request.url
                value = float(request.url.split("since=")[1].split("&")[0]) if since else None
                route.fulfill(status=200, content_type="application/json", body=feed.telemetry(value))

            page.on(
                "request",
                lambda r: (
                    requests.append((time.monotonic(), r.url.split("/api/gpu/")[1].split("?")[0]))
                    if "/api/gpu/" in r.url
                    else None
                ),
            )
            page.route("**/api/gpu/telemetry*", telemetry)
            page.route(
                "**/api/gpu/devices*",
                lambda route, _r: route.fulfill(
                    status=200, content_type="application/json", body=feed.devices()
                ),
            )
            open_lab(page, lab)
            open_gpu_panel(page)
            page.evaluate(
                "async () => { await window.jupyterapp.commands.execute('jupyter-gpu:dashboard'); }"
            )
            dashboard = page.locator("#jupyter-gpu-dashboard")
            dashboard.locator(f".jp-gpu-dashboard-gpu >> nth={args.gpus - 1}").wait_for(timeout=60_000)
            dashboard.locator(f'[data-window="{int(args.minutes * 60)}"]').click()
            page.wait_for_function(
                f"""() => Number(document.querySelector('#jupyter-gpu-dashboard .jp-gpu-chart-memory')
                    ?.dataset.samples) >= {int(args.minutes * 60) - 5}"""
            )
            charts = page.locator(".jp-gpu-timechart").count()
            shown = page.evaluate(
                """() => [...document.querySelectorAll('.jp-gpu-timechart')].filter(c => {
                    const r = c.getBoundingClientRect();
                    return r.bottom > 0 && r.top < innerHeight && r.width > 0; }).length"""
            )
            page.evaluate(FRAMES_PROBE)
            started = time.monotonic()
            page.wait_for_timeout(args.seconds * 1000)  # a benchmark, not a test: record for a while
            frames = page.evaluate("() => window.__frames.slice(1)")
            long = page.evaluate("() => window.__long")
            recorded = [name for t, name in requests if t >= started]
            if args.profile:
                cdp = page.context.new_cdp_session(page)
                cdp.send("Profiler.enable")
                cdp.send("Profiler.start")
                profiled = time.monotonic()
                page.wait_for_timeout(args.seconds * 1000)
                profile = cdp.send("Profiler.stop")["profile"]
                polls = sum(name == "telemetry" for t, name in requests if t >= profiled)
        finally:
            browser.close()
            lab.stop()
    per_min = {name: recorded.count(name) * 60 / args.seconds for name in sorted(set(recorded))}
    print(
        f"{args.gpus} GPUs, {args.minutes:g} min window, {charts} charts (panel + dashboard), {shown} in view"
    )
    print(
        f"frames over {args.seconds:g} s: n={len(frames)} p50={statistics.median(frames):.1f} ms "
        f"p95={pct(frames, 95):.1f} ms p99={pct(frames, 99):.1f} ms max={max(frames):.1f} ms"
    )
    print(f"long tasks (>50 ms): {len(long)}" + (f", longest {max(long):.0f} ms" if long else ""))
    print("requests per minute: " + ", ".join(f"{k} {v:.0f}" for k, v in per_min.items()))
    if args.profile:
        print(profile_per_poll(profile, polls))


if __name__ == "__main__":
    main()
