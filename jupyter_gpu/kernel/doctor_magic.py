"""``%gpu_doctor``: the doctor's checklist (``jupyter_gpu.doctor``) in a notebook (HTML), a
terminal (text) or for programs (JSON)."""

from __future__ import annotations

from collections.abc import Callable

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..doctor import diagnose
from ..doctor.facts import DataLoaderPlan
from .extension import unregister_magics
from .magic_args import parse as parse_args


@magics_class
class DoctorMagics(Magics):
    @magic_arguments()
    @argument("--json", action="store_true", help="print the report as JSON, for programs")
    @argument("--no-server", action="store_true", help="do not look for the jupyter_gpu server extension")
    @argument("--workers", type=int, help="DataLoader workers you will use (with --batch-mib)")
    @argument("--batch-mib", type=float, help="MiB per batch: checks /dev/shm against what the workers need")
    @line_magic
    def gpu_doctor(self, line: str) -> None:
        """Explain why torch cannot use a GPU in this kernel, or confirm that it can.

        A checklist (OK / INFO / WARN / FAIL, each problem with a concrete fix) under a one-line
        verdict: torch's build, the NVIDIA driver and its CUDA version, CUDA_VISIBLE_DEVICES,
        GPU architecture, ECC, MIG, allocator settings, cuDNN, NCCL and its environment
        (interfaces, disabled transports, debug noise, error handling), CUDA_LAUNCH_BLOCKING,
        TF32, /dev/shm and open files for DataLoader workers, the NVML bindings, nvidia-smi, root,
        whether the jupyter_gpu server extension answers and whether the Jupyter server is open
        to others (no token, a network bind without TLS, allow_origin, the XSRF check).

        It never starts CUDA in this kernel: NVML and the environment come first, and unless this
        kernel has already initialised CUDA, torch is asked in a short-lived child process (a few
        seconds).
        """
        args = parse_args(self.gpu_doctor, line)
        try:
            plan = DataLoaderPlan.stated(args.workers, args.batch_mib)
        except ValueError as error:
            raise UsageError(str(error)) from None
        report = diagnose(check_server=not args.no_server, dataloader=plan)
        if args.json:
            print(report.to_json())
        else:
            display(report)


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = DoctorMagics(ipython)
    ipython.register_magics(magics)
    return lambda: unregister_magics(ipython, magics)
