"""``jupyter gpu doctor``: the checks of ``%gpu_doctor``, for a terminal or a script."""

from __future__ import annotations

import argparse

from .common import EXIT_FAIL, EXIT_OK


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "doctor",
        help="why torch cannot use a GPU here, or confirmation that it can (exit 1 on any FAIL)",
        description="The checklist of %gpu_doctor: torch's build, the driver, CUDA_VISIBLE_DEVICES, "
        "architecture, ECC, MIG, allocator settings, cuDNN, NCCL, /dev/shm, NVML, the server "
        "extension. Each problem comes with a fix. Exits 1 when any check FAILs.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON, for scripts")
    p.add_argument(
        "--no-server", action="store_true", help="do not look for the jupyter_gpu server extension"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..doctor import Status, diagnose

    # torch is asked in a child process, exactly as in a kernel: a broken torch cannot crash this.
    report = diagnose(check_server=not args.no_server)
    print(report.to_json() if args.json else str(report))
    return EXIT_FAIL if any(c.status is Status.FAIL for c in report.checks) else EXIT_OK
