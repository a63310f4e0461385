"""Benchmark the GPU telemetry path: NVML sample cost, event-loop lag, request latency.

    python benchmarks/telemetry.py [--duration 15] [--simulated]

Prints:
1. cost of one sample per GPU through jupyter_gpu's NvmlReader: fast fields (GPM included, and
   GPM alone), slow fields (field values; NVML's PCIe counter where the GPU has no GPM);
2. a real `jupyter server` with jupyter_gpu (1 Hz sampler) and 0 / 3 / 50 clients polling
   `api/gpu/telemetry` each second: `GET api/status` latency at 20 Hz, the loop's lag (p50/p99,
   benchmarks/lagprobe.py), the telemetry request's latency, the sampler's CPU use;
3. the same against jupyterlab-nvdashboard (if installed) with 0, 1 and 3 of its websockets;
4. with --first-reply (alone): a page load's full-history reply with 8 simulated GPUs of 32
   processes each and 60 minutes of history (benchmarks/historyfill.py writes it in): bytes raw
   and gzipped, server CPU per reply (one alone, each after a new sample; and within a burst), and
   `GET api/status` p99 and loop lag p99 while 50 page loads land within a second, every 2 s,
   against the same server without them (an older checkout on PYTHONPATH compares). Without a
GPU, --simulated runs against replayed H200 readings (labelled as such).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient
from tornado.websocket import websocket_connect

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
READINGS = ROOT / "tests" / "fixtures" / "nvml_readings_2gpu.json"
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def sample_cost(simulated: bool) -> None:
    from jupyter_gpu.nvml import NvmlReader, NvmlUnavailable

    if simulated:
        from jupyter_gpu.nvml.simulated import SimulatedNVML

        reader = NvmlReader(SimulatedNVML.from_file(READINGS))
    else:
        reader = NvmlReader()
    try:
        count = reader.open()
    except NvmlUnavailable as error:
        print(f"no usable GPU: {error.reason}\n(pass --simulated to benchmark against replayed readings)")
        sys.exit(1)
    from jupyter_gpu.nvml.gpm import GpmReader

    gpm = GpmReader(reader.nvml)
    rows = []
    for index in range(count):
        name = reader.device_info(index)[0]["name"]
        fast, slow, gpm_reads = [], [], []
        handle = reader.nvml.nvmlDeviceGetHandleByIndex(index)
        for _ in range(200):  # GPM alone: one sample and the metrics since the one before
            t = time.perf_counter()
            gpm.read(index, handle, {}, {})
            gpm_reads.append(time.perf_counter() - t)
        for _ in range(200):
            t = time.perf_counter()
            reader.fast(index)
            fast.append(time.perf_counter() - t)
        for _ in range(5):
            t = time.perf_counter()
            reader.slow(index)
            slow.append(time.perf_counter() - t)
        rows.append(
            [
                str(index),
                name,
                f"{statistics.median(fast) * 1e6:.0f}",
                f"{pct(fast, 99) * 1e6:.0f}",
                "no GPM" if gpm.unsupported(index, handle) else f"{statistics.median(gpm_reads) * 1e6:.0f}",
                f"{statistics.median(slow) * 1e3:.1f}",
            ]
        )
    gpm.close()
    reader.close()
    header = ["gpu", "name", "fast p50 µs", "fast p99 µs", "of which GPM p50 µs", "slow ms"]
    table(f"1. One sample per GPU{' (SIMULATED readings)' if simulated else ''}", header, rows)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A real `jupyter server` subprocess with the lag probe and one GPU extension."""

    def __init__(
        self, extension: str, simulated: bool, gpu_config: dict | None = None, fill: bool = False
    ) -> None:
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory()
        # "none" is the baseline: the same server with neither GPU extension loaded
        exts = {
            "lagprobe": True,
            "jupyter_gpu": extension == "jupyter_gpu",
            "jupyterlab_nvdashboard": extension == "nvdashboard",
            "historyfill": fill,
        }
        config = {
            "ServerApp": {"jpserver_extensions": exts},
            "GPUMonitor": {"interval": 1.0, "slow_interval": 5.0},
        }
        if simulated:
            config["GPUMonitor"].update(backend="simulated", simulated_readings=str(READINGS))
        config["GPUMonitor"].update(gpu_config or {})
        Path(self.dir.name, "jupyter_server_config.json").write_text(json.dumps(config))
        env = {
            **os.environ,
            # an older checkout on PYTHONPATH is the jupyter_gpu measured (before this one's)
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(HERE), os.environ.get("PYTHONPATH", ""), str(ROOT)) if p
            ),
            "JUPYTER_CONFIG_DIR": self.dir.name,
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--allow-root",
                "--no-browser",
                f"--port={self.port}",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.dir.name}",
            ],
            env=env,
            cwd=self.dir.name,  # `python -m` puts the working directory first on sys.path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.base = f"http://127.0.0.1:{self.port}/"
        self.http = AsyncHTTPClient(max_clients=200)

    async def get(self, path: str, gzip: bool = False) -> tuple[float, bytes]:
        t = time.perf_counter()
        headers = {"Authorization": f"token {self.token}", "Accept-Encoding": "gzip" if gzip else "identity"}
        response = await self.http.fetch(
            self.base + path, headers=headers, decompress_response=False, request_timeout=120
        )
        return time.perf_counter() - t, response.body

    async def wait_ready(self) -> None:
        for _ in range(300):
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + self.proc.stderr.read()[-3000:])
            try:
                await self.get("lagprobe")
                return
            except Exception:
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.dir.cleanup()


async def poll_telemetry(server: Server, stop: asyncio.Event, latencies: list[float]) -> None:
    since = None
    await asyncio.sleep(secrets.randbelow(1000) / 1000)  # spread clients like real page loads
    while not stop.is_set():
        path = "api/gpu/telemetry" + (f"?since={since}" if since else "")
        dt, body = await server.get(path)
        latencies.append(dt)
        since = json.loads(body)["now"]
        await asyncio.sleep(1.0)


async def nvdashboard_socket(server: Server, stop: asyncio.Event, _: list[float]) -> None:
    url = server.base.replace("http", "ws") + f"nvdashboard/gpu_resource?token={server.token}"
    conn = await websocket_connect(url)
    conn.write_message(json.dumps({"updateFrequency": 100, "isPaused": False}))
    while not stop.is_set():
        if await conn.read_message() is None:
            break
    conn.close()


async def scenario(extension: str, clients: int, duration: float, simulated: bool) -> list[str]:
    server = Server(extension, simulated)
    try:
        await server.wait_ready()
        stop = asyncio.Event()
        client_latency: list[float] = []
        client = nvdashboard_socket if extension == "nvdashboard" else poll_telemetry
        tasks = [asyncio.create_task(client(server, stop, client_latency)) for _ in range(clients)]
        await asyncio.sleep(2.0)  # warm up
        client_latency.clear()
        status, before, after = await status_probe(server, duration)
        stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=3)
        lags = after["lags"]
        cpu = ""
        if after["sampler_cpu_seconds"] is not None:
            cpu = f"{100 * (after['sampler_cpu_seconds'] - before['sampler_cpu_seconds']) / (after['uptime'] - before['uptime']):.2f}"
        clients_label = f"{clients} {'websockets' if extension == 'nvdashboard' else 'pollers'}"
        return [
            extension,
            clients_label,
            f"{pct(status, 50) * 1e3:.1f}",
            f"{pct(status, 99) * 1e3:.1f}",
            f"{pct(lags, 50) * 1e3:.2f}",
            f"{pct(lags, 99) * 1e3:.2f}",
            f"{pct(client_latency, 50) * 1e3:.1f}" if client_latency else "",
            f"{pct(client_latency, 99) * 1e3:.1f}" if client_latency else "",
            cpu,
        ]
    finally:
        server.stop()


def eight_gpu_readings(directory: str) -> str:
    """The 2-GPU H200 readings as 8 GPUs, each with 32 processes (the history keeps 32 per GPU)."""
    readings = json.loads(READINGS.read_text())
    first = readings["devices"][0]
    devices = []
    for i in range(8):
        device = json.loads(json.dumps(first))
        device.update(index=i, uuid=f"{first['uuid'][:-2]}{i:02d}", pci_bus_id=f"00000000:00:{6 + i:02X}.0")
        device["compute_processes"] = [
            {"pid": 200000 + 100 * i + j, "used_gpu_memory": (j + 1) * 1_234_567_890 % 4_000_000_000}
            for j in range(32)
        ]
        devices.append(device)
    path = Path(directory, "readings_8gpu.json")
    path.write_text(json.dumps({**readings, "devices": devices}))
    return str(path)


def server_cpu(server: Server) -> float:
    """CPU seconds the server process's threads have used, to the nanosecond (the scheduler's
    own count, per thread: /proc/PID/stat counts in 10 ms ticks, too coarse for one reply)."""
    total = 0
    for task in Path(f"/proc/{server.proc.pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return total / 1e9


async def status_probe(server: Server, duration: float) -> tuple[list[float], dict, dict]:
    """GET api/status at 20 Hz for ``duration`` s: its latencies, and the lag probe's reports
    before (which drains it) and after (the loop's lags meanwhile, the sampler's CPU)."""
    _, before = await server.get("lagprobe")
    status: list[float] = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        dt, _ = await server.get("api/status")
        status.append(dt)
        await asyncio.sleep(0.05)
    _, after = await server.get("lagprobe")
    return status, json.loads(before), json.loads(after)


async def page_loads(server: Server, stop: asyncio.Event, count: int, took: list[float]) -> None:
    """Every 2 s (or once the last burst is answered), ``count`` full-history requests (gzip
    accepted) spread over one second; ``took`` gets each one's latency."""
    while not stop.is_set():
        starts = sorted(secrets.randbelow(1000) / 1000 for _ in range(count))

        async def one(delay: float) -> None:
            await asyncio.sleep(delay)
            took.append((await server.get("api/gpu/telemetry", gzip=True))[0])

        began = time.monotonic()
        await asyncio.gather(*(one(d) for d in starts))
        await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - began)))


async def first_reply(duration: float, label: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = {"history_seconds": 3600, "simulated_readings": eight_gpu_readings(directory)}
        server = Server("jupyter_gpu", True, config, fill=True)
        try:
            await server.wait_ready()
            await asyncio.sleep(1.5)  # a first sample to copy
            _, filled = await server.get("historyfill?seconds=3600")
            _, raw = await server.get("api/gpu/telemetry")
            _, zipped = await server.get("api/gpu/telemetry", gzip=True)
            samples = len(json.loads(raw)["history"])
            # CPU of one reply alone, each after a new sample (nothing cached), less idle CPU
            idle0 = server_cpu(server)
            await asyncio.sleep(5.5)
            idle = (server_cpu(server) - idle0) / 5.5
            alone = []
            for _ in range(5):
                await asyncio.sleep(1.1)
                before = server_cpu(server)
                await server.get("api/gpu/telemetry", gzip=True)
                alone.append(server_cpu(server) - before)
            base_status, _, base_probe = await status_probe(server, duration)
            base_lags = base_probe["lags"]
            stop = asyncio.Event()
            cpu0, t0 = server_cpu(server), time.monotonic()
            took: list[float] = []
            loads = asyncio.create_task(page_loads(server, stop, 50, took))
            status, _, probe = await status_probe(server, duration)
            lags = probe["lags"]
            stop.set()
            await loads
            cpu = server_cpu(server) - cpu0 - idle * (time.monotonic() - t0)
        finally:
            server.stop()
    loads_p = f"{len(took)}; {pct(took, 50):.2f} / {pct(took, 99):.2f}"
    pairs = [
        ("history samples: in the store / in a full reply", f"{json.loads(filled)['samples']} / {samples}"),
        ("bytes per full reply, raw / gzipped", f"{len(raw):,} / {len(zipped):,}"),
        ("server CPU ms per reply, alone (new sample each)", f"{statistics.median(alone) * 1e3:.1f}"),
        ("server CPU ms per reply, in bursts of 50", f"{cpu / max(1, len(took)) * 1e3:.1f}"),
        ("page loads answered; their p50 / p99 s", loads_p),
        (
            "api/status p99 ms: baseline / 50 page loads",
            f"{pct(base_status, 99) * 1e3:.1f} / {pct(status, 99) * 1e3:.1f}",
        ),
        ("api/status p99 vs baseline", f"{pct(status, 99) / pct(base_status, 99):.2f}x"),
        (
            "loop lag p99 ms: baseline / 50 page loads",
            f"{pct(base_lags, 99) * 1e3:.2f} / {pct(lags, 99) * 1e3:.2f}",
        ),
    ]
    rows = [[label, metric, value] for metric, value in pairs]
    table(
        f"4. A page load's full reply: 8 simulated H200s, 60 min of history ({label})",
        ["code", "metric", "value"],
        rows,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per scenario")
    parser.add_argument("--simulated", action="store_true", help="replay H200 readings instead of NVML")
    parser.add_argument("--first-reply", action="store_true", help="only table 4 (always simulated)")
    parser.add_argument("--label", default="this checkout", help="names the code measured in table 4")
    args = parser.parse_args()
    if args.first_reply:
        await first_reply(args.duration, args.label)
        return
    sample_cost(args.simulated)
    header = [
        "server",
        "clients",
        "status p50 ms",
        "status p99 ms",
        "loop lag p50 ms",
        "loop lag p99 ms",
        "telemetry p50 ms",
        "telemetry p99 ms",
        "sampler % of a core",
    ]
    rows = [await scenario("none", 0, args.duration, args.simulated)]
    rows += [await scenario("jupyter_gpu", n, args.duration, args.simulated) for n in (0, 3, 50)]
    try:
        import jupyterlab_nvdashboard  # noqa: F401
    except ImportError:
        rows.append(["nvdashboard", "not installed", "", "", "", "", "", "", ""])
    else:
        if not args.simulated:
            rows += [await scenario("nvdashboard", n, args.duration, False) for n in (0, 1, 3)]
    table("2. A real jupyter server under load (GET api/status at 20 Hz)", header, rows)


if __name__ == "__main__":
    asyncio.run(main())
