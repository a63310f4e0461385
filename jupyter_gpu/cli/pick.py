"""``jupyter gpu pick``: the GPUs a job should use now, most free memory first (like nvitop's
``nvisel``), as ``CUDA_VISIBLE_DEVICES`` wants them: by UUID, so that no device ordering can
send the job elsewhere. MIG devices are candidates of their own; a GPU in MIG mode is not."""

from __future__ import annotations

import argparse
import re
import sys

from ..analysis.gpu_choice import NotEnough, candidates, choose
from ..analysis.units import format_bytes
from ..nvml.holders import all_devices
from .common import EXIT_NO_GPU, EXIT_OK, CliError, no_gpu_text, print_json

UNITS = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}


def memory_size(text: str) -> int:
    """Bytes from ``16GiB``, ``500MB`` or a plain number; an argparse type, so a bad one is a usage error."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match[2].lower() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 16GiB, 500MB, or bytes)")
    return int(float(match[1]) * UNITS[match[2].lower()])


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "pick",
        help="print the GPUs a job should use now (most free memory first)",
        description="Print the UUIDs of the GPUs (or MIG devices) with the most free memory now, "
        "comma-separated, for CUDA_VISIBLE_DEVICES. Exit code 1 when fewer than --count have "
        "--memory free, 3 when no GPU can be read.",
    )
    p.add_argument("--count", type=int, default=1, metavar="N", help="how many GPUs (default 1)")
    p.add_argument(
        "--memory", type=memory_size, default=0, metavar="BYTES", help="free memory each needs, e.g. 16GiB"
    )
    output = p.add_mutually_exclusive_group()
    output.add_argument("--export", action="store_true", help="print `export CUDA_VISIBLE_DEVICES=...`")
    output.add_argument("--json", action="store_true", help="print JSON: the chosen devices")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise CliError("--count must be at least 1", 2)
    devices, reason = all_devices()
    if reason is not None:  # as `jupyter gpu status` says it: what is wrong, then the fix
        print(no_gpu_text("from NVML on this machine", reason, None), file=sys.stderr)
        return EXIT_NO_GPU
    try:
        chosen = choose(candidates(devices), count=args.count, memory=args.memory)
    except NotEnough as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json(
            [{"index": d.index, "uuid": d.uuid, "name": d.name, "free_bytes": d.free_bytes} for d in chosen]
        )
        return EXIT_OK
    uuids = ",".join(d.uuid for d in chosen)
    print(f"export CUDA_VISIBLE_DEVICES={uuids}" if args.export else uuids)
    if not args.export:
        for d in chosen:
            print(f"  GPU {d.index}: {d.name}, {format_bytes(d.free_bytes)} free", file=sys.stderr)
    return EXIT_OK
