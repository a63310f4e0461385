"""``jupyter gpu doctor``: the checks of ``%gpu_doctor``, for a terminal or a script."""

from __future__ import annotations

import argparse

from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, CliError


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "doctor",
        help="why torch cannot use a GPU here, or confirmation that it can (exit 1 on any FAIL)",
        description="The checklist of %gpu_doctor: torch's build, the driver, CUDA_VISIBLE_DEVICES, "
        "architecture, ECC, MIG, allocator settings, cuDNN, NCCL and its environment, "
        "CUDA_LAUNCH_BLOCKING, /dev/shm and open files for DataLoader workers, NVML, containers, the "
        "server extension and how exposed the Jupyter server is. Each problem comes with a fix. "
        "Exits 1 when any check FAILs.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON, for scripts")
    p.add_argument(
        "--no-server", action="store_true", help="do not look for the jupyter_gpu server extension"
    )
    p.add_argument("--workers", type=int, help="DataLoader workers you will use (with --batch-mib)")
    p.add_argument(
        "--batch-mib", type=float, help="MiB per batch, to check /dev/shm against what the workers need"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..doctor import Status, diagnose
    from ..doctor.facts import DataLoaderPlan

    try:
        plan = DataLoaderPlan.stated(args.workers, args.batch_mib)
    except ValueError as error:
        raise CliError(str(error), EXIT_USAGE) from None
    # torch is asked in a child process, exactly as in a kernel: a broken torch cannot crash this.
    report = diagnose(check_server=not args.no_server, dataloader=plan)
    print(report.to_json() if args.json else str(report))
    return EXIT_FAIL if any(c.status is Status.FAIL for c in report.checks) else EXIT_OK
