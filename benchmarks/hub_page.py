"""Benchmark the instructor's view: how long one page build takes over many user servers.

    python benchmarks/hub_page.py [--servers 100] [--rounds 5] [--timeout 1.5]

A hundred cheap tornado "user servers" behind one fake proxy answer the kernels and telemetry
routes (tests/support/fake_fleet.py: every tenth slow by 0.5 s, one hung, one garbage, one of the wrong
shape, one closing the connection), and a fake Hub API lists them. Each round builds the view
once, as api/kernels does; the table gives the wall time per round and the rows per state.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.fake_fleet import FakeFleet, mixed  # noqa: E402

from jupyter_gpu.client import Server  # noqa: E402
from jupyter_gpu.hub.fleet import Hub  # noqa: E402
from jupyter_gpu.hub.handlers import Builder  # noqa: E402


async def run(servers: int, rounds: int, timeout: float) -> list[tuple[float, collections.Counter]]:
    fleet = FakeFleet(mixed(servers))
    await fleet.start()
    hub = Hub(Server(f"{fleet.url}/hub/api/", "service-token"), fleet.url, timeout=timeout)
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        view = await Builder(hub).build()
        results.append(
            (time.perf_counter() - start, collections.Counter(s["state"] for s in view["servers"]))
        )
    fleet.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=1.5)
    args = parser.parse_args()
    # The hung fake servers' requests are cut off when the loop closes, and tornado's access log
    # would print each as a 500 after the table: they are the fake fleet's, not the service's.
    logging.getLogger("tornado.access").disabled = True
    results = asyncio.run(run(args.servers, args.rounds, args.timeout))
    print(f"{args.servers} user servers, timeout {args.timeout:g} s per server\n")
    print("| round | page build (s) | ok | not answering | error |")
    print("|---:|---:|---:|---:|---:|")
    for n, (seconds, states) in enumerate(results, 1):
        print(f"| {n} | {seconds:.3f} | {states['ok']} | {states['not_answering']} | {states['error']} |")
    times = [s for s, _ in results]
    print(f"\nmedian {statistics.median(times):.3f} s, worst {max(times):.3f} s")


if __name__ == "__main__":
    main()
