"""Benchmark the cells route against a kernel full of the largest records the server takes.

    python benchmarks/cells_reply.py [--cells 1000] [--rounds 5]

Starts a real `jupyter server` with jupyter_gpu (replayed H200 readings) and the lag probe
(benchmarks/lagprobe.py), starts a kernel, and writes its timeline file as code in the kernel
could: its own process id, its own file name, file after file of the largest records (every list
full, every string and number at its widest: tests/support/cell_records.py), each file read by
the server before the next. Then it asks `GET api/gpu/kernels/<id>/cells` as the panel does (no
parameters, with and without gzip), pages through every cell with `?since=`, and asks
`GET api/gpu/kernels`. Per kind of request: the reply's size, its latency, and the longest the
server's event loop was late by while those requests ran (a 10 ms tick; a request that holds the
loop for 50 ms makes the tick ~50 ms late). Reading the files also brings on the interpreter's
full garbage collections of the whole server's heap (~1 ms per 1,000 objects on a slow VM), which
show as a few long lags in that row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing
sys.path.insert(0, str(ROOT / "tests"))  # the largest record, as the tests build it

from support.cell_records import document, largest_record  # noqa: E402
from telemetry import Server, table  # noqa: E402

from jupyter_gpu.analysis.cells import MAX_BYTES, cells_file_name  # noqa: E402


async def fetch(server: Server, path: str, **headers: str) -> tuple[float, int]:
    """Seconds to the whole reply, and its size in bytes as it came over the wire."""
    started = time.perf_counter()
    response = await server.http.fetch(
        server.base + path,
        headers={"Authorization": f"token {server.token}", **headers},
        decompress_response=False,
    )
    return time.perf_counter() - started, len(response.body)


async def lag_during(server: Server, requests) -> tuple[list[tuple[float, int]], float]:
    """The requests' (seconds, bytes), and the event loop's longest lag meanwhile (ms)."""
    await server.get("lagprobe")  # drain
    results = [await request() for request in requests]
    _, body = await server.get("lagprobe")
    return results, max(json.loads(body)["lags"], default=0.0) * 1e3


def row(what: str, results: list[tuple[float, int]], lag: float | str) -> list[str]:
    times = [t * 1e3 for t, _ in results]
    return [
        what,
        str(len(results)),
        f"{max(n for _, n in results) / 1e6:.2f}",
        f"{statistics.median(times):.1f}",
        f"{max(times):.1f}",
        lag if isinstance(lag, str) else f"{lag:.1f}",
    ]


async def start_kernel(server: Server) -> tuple[str, int]:
    response = await server.http.fetch(
        server.base + "api/kernels",
        method="POST",
        body=json.dumps({"name": "python3"}),
        headers={"Authorization": f"token {server.token}"},
    )
    kernel_id = json.loads(response.body)["id"]
    _, body = await server.get("api/gpu/kernels")
    (kernel,) = [k for k in json.loads(body)["kernels"] if k["id"] == kernel_id]
    return kernel_id, kernel["pid"]


async def fill(server: Server, runtime: Path, kernel_id: str, pid: int, cells: int) -> list[str]:
    """Write the kernel's file with the largest records, file after file; the server reads each
    (a cells request with ``limit=1`` makes it read the file)."""
    path = runtime / cells_file_name(kernel_id)
    per_file = MAX_BYTES // (len(json.dumps(largest_record(0))) + 1)
    results, lags, sizes = [], [], []
    for first in range(0, cells, per_file):
        batch = [largest_record(s) for s in range(first, min(first + per_file, cells))]
        spare = path.with_name(path.name + ".tmp")
        spare.write_text(json.dumps(document(batch, kernel_id=kernel_id, pid=pid)))
        spare.chmod(0o600)
        sizes.append(spare.stat().st_size)
        os.replace(spare, path)  # whole at once, as the kernel's writer replaces it
        (result,), lag = await lag_during(
            server, [lambda: fetch(server, f"api/gpu/kernels/{kernel_id}/cells?limit=1")]
        )
        results.append(result)
        lags.append(lag)
    what = f"read a file of {max(sizes) / 1e6:.2f} MB ({per_file} records), reply 1 cell"
    # The few long lags here are the interpreter's full garbage collections of the server's heap,
    # which parsing many files brings on sooner; the median is what reading one file holds.
    return row(what, results, f"{max(lags):.1f} (median {statistics.median(lags):.1f})")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=1000, help="largest records the kernel writes")
    parser.add_argument("--rounds", type=int, default=5, help="requests of each kind")
    args = parser.parse_args()
    runtime = Path(tempfile.mkdtemp(prefix="jgpu-runtime-"))
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)  # the server's, so its kernels' files land here
    server = Server("jupyter_gpu", simulated=True)
    try:
        await server.wait_ready()
        kernel_id, pid = await start_kernel(server)
        rows = [await fill(server, runtime, kernel_id, pid, args.cells)]
        cells = f"api/gpu/kernels/{kernel_id}/cells"
        plain = [lambda: fetch(server, cells)] * args.rounds
        rows.append(row("cells, as the panel asks (no gzip)", *await lag_during(server, plain)))
        zipped = [lambda: fetch(server, cells, **{"Accept-Encoding": "gzip"})] * args.rounds
        rows.append(row("cells, as the panel asks (gzip)", *await lag_during(server, zipped)))
        pages, cursor, more = [], 0, True
        await server.get("lagprobe")
        while more:
            started = time.perf_counter()
            _, body = await server.get(f"{cells}?since={cursor}")
            pages.append((time.perf_counter() - started, len(body)))
            reply = json.loads(body)
            cursor, more = reply["cursor"], reply["more"]
        _, probe = await server.get("lagprobe")
        lag = max(json.loads(probe)["lags"], default=0.0) * 1e3
        rows.append(row(f"every cell, page after page (?since=, {len(pages)} pages)", pages, lag))
        kernels = [lambda: fetch(server, "api/gpu/kernels")] * args.rounds
        rows.append(row("kernels", *await lag_during(server, kernels)))
    finally:
        server.stop()
    table(
        f"Cells route, one kernel with {args.cells} of the largest records (a real jupyter server)",
        ["request", "replies", "reply MB (max)", "latency p50 ms", "latency max ms", "loop lag max ms"],
        rows,
    )


if __name__ == "__main__":
    asyncio.run(main())
