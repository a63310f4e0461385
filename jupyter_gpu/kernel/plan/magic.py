"""``%gpu_plan``: will a training step fit, per strategy, before the first real step runs.

The step is measured on fake tensors by torch's own trackers (``jupyter_gpu.kernel.plan.step``):
no real memory, and no CUDA call in a kernel that has not used CUDA. The verdict, the rows and the
line that runs the cheapest strategy are pure functions (``jupyter_gpu.analysis.plan``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ...analysis.plan import Plan, parse_bytes, parse_strategies
from ..extension import ShellMagics, unregister_magics
from ..magic_args import parse as parse_args
from ..magic_args import quoted_text, shown

_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
MAX_GPUS = 1 << 16


def _model(ipython: InteractiveShell, name: str) -> Any:
    """The object MODEL names: only a name (or attribute), so that nothing real is built here."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"MODEL {shown(name)} must be a name: a module, or a function that builds one (it runs on fake tensors)"
        )
    try:
        value = eval(name, ipython.user_ns)  # noqa: S307 -- a dotted name, checked above
    except Exception as exc:
        raise UsageError(f"MODEL {shown(name)}: {type(exc).__name__}: {exc}") from None
    import torch

    if not isinstance(value, torch.nn.Module) and not callable(value):
        raise UsageError(
            f"MODEL {shown(name)} is a {type(value).__name__}: give an nn.Module or a function that builds one"
        )
    return value


def _device_memory(text: str, gpus: int) -> tuple[int | None, str]:
    if text == "auto":
        from .device_memory import free_device_memory

        return free_device_memory(gpus)
    try:
        return parse_bytes(text), "given (--device-memory)"
    except ValueError as exc:
        raise UsageError(f"--device-memory: {exc}") from None


@magics_class
class PlanMagics(ShellMagics):
    @magic_arguments()
    @argument(
        "model",
        metavar="MODEL",
        help="an nn.Module (on the meta device, the CPU, ...) or a function that builds one",
    )
    @argument(
        "--input",
        required=True,
        type=quoted_text,
        metavar="EXPR",
        help="an expression that builds one batch (a tensor, a tuple of arguments or a dict of keyword arguments)",
    )
    @argument(
        "--target",
        type=quoted_text,
        default=None,
        metavar="EXPR",
        help="an expression that builds the batch's target",
    )
    @argument(
        "--loss",
        type=quoted_text,
        default=None,
        metavar="mse|cross_entropy|EXPR",
        help="the loss: mse, cross_entropy or an expression of `out` and `target` (default: the output's mean)",
    )
    @argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adamw", help="default adamw")
    @argument(
        "--dtype",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="the parameters' dtype (default fp32; mixed precision is the amp strategy)",
    )
    @argument("--gpus", type=int, default=1, help="GPUs for the ddp and fsdp strategies (default 1)")
    @argument(
        "--device-memory",
        default="auto",
        metavar="BYTES|auto",
        help="memory per GPU, e.g. 80GiB; auto: what this machine's GPU has free",
    )
    @argument(
        "--strategies",
        default=None,
        metavar="LIST",
        help="comma-separated: plain, amp, amp-fp16, checkpoint, sac, ddp, fsdp, and combinations like fsdp+amp or fsdp+offload",
    )
    @argument(
        "--max-batch",
        action="store_true",
        help="find the largest batch that fits each strategy (bisection on fake tensors)",
    )
    @argument(
        "--batch-dim", type=int, default=0, help="the batch dimension of --input and --target (default 0)"
    )
    @line_magic
    def gpu_plan(self, line: str) -> Plan:
        """Plan a training step before running it: will it fit, per strategy, and how fast.

        ``%gpu_plan MODEL --input EXPR [--target EXPR] [--loss mse|cross_entropy|EXPR]
        [--optimizer sgd|adam|adamw] [--dtype fp32|bf16|fp16] [--gpus N]
        [--device-memory BYTES|auto] [--strategies LIST] [--max-batch] [--batch-dim D]``
        runs forward, loss, backward and the optimizer's step on fake tensors (torch's
        FakeTensorMode: no real memory is used, CUDA is not initialised) twice: the second step,
        tracked by torch's MemTracker (FSDPMemTracker for FSDP2), is what every step costs once
        the optimizer's state exists. For each strategy (plain, amp, selective and full
        activation checkpointing, DDP and FSDP2 over --gpus, FSDP2 with CPU offload) it shows the
        peak per GPU and what makes it, whether it fits, a roofline step time where this kernel
        has initialised CUDA, and names the cheapest strategy that fits with the line that runs
        it. Returns the plan: ``plan.rows`` is one mapping per strategy.
        """
        args = parse_args(self.gpu_plan, line)
        if not 1 <= args.gpus <= MAX_GPUS:
            raise UsageError(f"--gpus must be between 1 and {MAX_GPUS}.")
        try:
            strategies = parse_strategies(args.strategies, args.gpus)
        except ValueError as exc:
            raise UsageError(f"--strategies: {exc}") from None
        device_bytes, device_source = _device_memory(args.device_memory, args.gpus)
        source = _model(self.ipython, args.model)
        from .fake_world import DTYPES, Batch, FakeWorld, PlanError, evaluate
        from .planner import PlanRequest, make_plan
        from .step import StepSpec

        loss = args.loss if args.loss not in (None, "mean") else None
        try:
            probe = FakeWorld.for_this_kernel()  # shapes only: every step makes its own tensors
            namespace = self.ipython.user_ns
            batch = Batch.of(evaluate(args.input, namespace, probe, "--input"), args.batch_dim, "--input")
            target = None
            if args.target is not None:
                value = evaluate(args.target, namespace, probe, "--target")
                target = Batch.of(value, args.batch_dim, "--target")
        except PlanError as exc:
            raise UsageError(str(exc)) from None
        spec = StepSpec(
            source=source,
            batch=batch,
            target=target,
            loss=loss,
            namespace=namespace,
            optimizer=args.optimizer,
            dtype=DTYPES[args.dtype],
        )
        request = PlanRequest(
            spec=spec,
            model_label=args.model,
            strategies=strategies,
            gpus=args.gpus,
            device_bytes=device_bytes,
            device_source=device_source,
            max_batch=args.max_batch,
        )
        return make_plan(request)


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = PlanMagics(ipython)
    ipython.register_magics(magics)
    return lambda: unregister_magics(ipython, magics)
