"""``jupyter gpu warmup``: pay CUDA's one-time start-up costs on every GPU, timed step by step.

Each process warms only itself, so this is not a warm-up for notebooks: it shows instructors
what the first steps cost on each GPU and that every library loads (cuBLAS, cuDNN, attention).
"""

from __future__ import annotations

import argparse
import dataclasses

from ..doctor import no_gpu_reason
from ..warmup import parse_devices, warm_up
from .common import EXIT_FAIL, EXIT_NO_GPU, EXIT_OK, EXIT_USAGE, CliError, print_json


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "warmup",
        help="run all of %%gpu_warmup's steps on every GPU and time them",
        description="Per GPU, every step of %gpu_warmup --all: CUDA context, elementwise/reduction/RNG "
        "kernels, a matmul per dtype, training steps of CNNs, norms, linear layers, embeddings and "
        "transformer blocks (fp32 and half-precision autocast), attention, SGD/Adam/AdamW steps. "
        "Exits 1 when a step fails.",
    )
    p.add_argument("--devices", default="all", help="GPU indices such as 0,1 (default: all)")
    p.add_argument("--nccl", action="store_true", help="also start an NCCL communicator per GPU")
    p.add_argument("--compile", action="store_true", help="also compile a tiny function with torch.compile")
    p.add_argument(
        "--json", action="store_true", help="print JSON (per GPU: each step's milliseconds and error)"
    )
    p.set_defaults(run=run)


def devices_option(text: str, count: int) -> list[int]:
    try:
        return parse_devices(text, count)
    except ValueError as error:
        raise CliError(f"{error} ({count} GPU{'s' if count != 1 else ''} visible)", EXIT_USAGE) from None


def run(args: argparse.Namespace) -> int:
    reason = no_gpu_reason()
    if reason is not None:
        if args.json:
            print_json({"ok": False, "reason": reason, "sections": [], "notes": []})
            return EXIT_NO_GPU
        raise CliError(f"nothing to warm. {reason}. Run `jupyter gpu doctor` for the fix.", EXIT_NO_GPU)
    import torch

    report = warm_up(
        devices_option(args.devices, torch.cuda.device_count()), nccl=args.nccl, compile=args.compile
    )
    failed = any(step.error for section in report.sections for step in section.steps)
    if args.json:
        print_json({"ok": not failed, "reason": None, **dataclasses.asdict(report)})
    else:
        print(report)
    return EXIT_FAIL if failed else EXIT_OK
