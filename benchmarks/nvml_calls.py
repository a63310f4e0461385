"""What each NVML call of the sampler's fast read costs, per GPU.

    python benchmarks/nvml_calls.py [--samples 200]

The sampler's fast read (``NvmlReader.fast``) makes a dozen NVML calls per GPU each interval.
``benchmarks/telemetry.py`` times the whole read; this times every call in it, by wrapping the
reader's NVML module, so a slow read can be pinned on the call that makes it slow. The same
calls, the same order, the same process as the sampler.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a source checkout


class TimedNVML:
    """The NVML module with every ``nvml*`` call timed, per function name."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.seconds: dict[str, list[float]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nvml, name)
        if not (callable(value) and name.startswith("nvml")):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds[name].append(time.perf_counter() - start)

        return timed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=200, help="fast reads per GPU")
    args = parser.parse_args()
    from jupyter_gpu.nvml import NvmlReader, NvmlUnavailable

    reader = NvmlReader()
    try:
        count = reader.open()
    except NvmlUnavailable as error:
        sys.exit(f"no usable GPU: {error.reason}")
    timed = TimedNVML(reader.nvml)
    reader.nvml = timed
    reader._gpm.nvml = timed  # GPM's calls are part of the read
    print(f"# NVML driver {reader.nvml.nvmlSystemGetDriverVersion()}; {args.samples} fast reads per GPU")
    print("gpu | NVML call | calls per read | p50 µs | p99 µs | share of the read")
    print("--- | --------- | -------------- | ------ | ------ | -----------------")
    for index in range(count):
        timed.seconds.clear()
        whole = []
        for _ in range(args.samples):
            start = time.perf_counter()
            reader.fast(index)
            whole.append(time.perf_counter() - start)
        total = sum(whole)
        for name, seconds in sorted(timed.seconds.items(), key=lambda kv: -sum(kv[1])):
            ordered = sorted(seconds)
            print(
                f"{index} | {name} | {len(seconds) / args.samples:g} | "
                f"{statistics.median(seconds) * 1e6:,.0f} | {ordered[int(0.99 * (len(ordered) - 1))] * 1e6:,.0f} | "
                f"{sum(seconds) / total:.0%}"
            )
        print(f"{index} | whole fast read | 1 | {statistics.median(whole) * 1e6:,.0f} | | 100%")
    reader.close()


if __name__ == "__main__":
    main()
