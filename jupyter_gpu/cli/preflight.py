"""``jupyter gpu preflight``: is every GPU of this machine ready for a workshop?

Each visible GPU multiplies two small matrices in every dtype and the result is compared with a
float64 CPU product of the same (already rounded) inputs, so only the GPU's own arithmetic can
make a difference: a faulty GPU, a broken driver or library shows up as a large error, not as a
crash in a student's notebook. With two or more GPUs, NCCL all-reduces across all of them
(see allreduce.py) and the measured bandwidth shows whether they talk over NVLink or a slow path.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from ..analysis.units import format_bytes
from ..doctor import no_gpu_reason
from .common import EXIT_FAIL, EXIT_NO_GPU, EXIT_OK, EXIT_USAGE, CliError, print_json

SIZE = 512


@dataclass(frozen=True)
class DtypeSpec:
    torch_dtype: str
    fp32_precision: str  # torch.set_float32_matmul_precision: "high" lets fp32 matmuls use TF32
    # Relative Frobenius error allowed. Inputs are rounded before both products, so the error is
    # accumulation and output rounding only; each bound is 10-50x what a healthy GPU shows,
    # and a faulty result is off by orders of magnitude.
    tolerance: float
    capability: tuple[int, int] = (0, 0)  # oldest architecture that has it in hardware


DTYPES: dict[str, DtypeSpec] = {
    "fp64": DtypeSpec("float64", "highest", 1e-10),
    "fp32": DtypeSpec("float32", "highest", 1e-4),
    "tf32": DtypeSpec("float32", "high", 1e-2, (8, 0)),
    "fp16": DtypeSpec("float16", "highest", 1e-2),
    "bf16": DtypeSpec("bfloat16", "highest", 5e-2, (8, 0)),
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "preflight",
        help="check every GPU before a workshop: matmul in each dtype, NCCL all-reduce bandwidth",
        description="Every visible GPU multiplies matrices in fp64, fp32, tf32, fp16 and bf16 and is "
        "checked against the CPU; with two or more GPUs an NCCL all-reduce runs across all of "
        "them (ranks started by torch.distributed elastic) and its bandwidth is reported. One "
        "line per GPU, then a verdict. Exit 0: ready; 1: a check failed; 3: no usable GPU.",
    )
    p.add_argument("--size-mib", type=int, default=256, help="all-reduce buffer per GPU in MiB (default 256)")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces (default 20, after 5 untimed)")
    p.add_argument(
        "--min-busbw",
        type=float,
        default=None,
        help="fail when the all-reduce bus bandwidth is below this many GB/s",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a stuck all-reduce fails")
    p.add_argument("--no-allreduce", action="store_true", help="only the per-GPU checks")
    p.add_argument(
        "--nccl-env",
        action="store_true",
        help="only an all-reduce with NCCL's environment as set (NCCL_SOCKET_IFNAME & co.): do the "
        "interface settings work? Without a GPU, gloo tests the interface",
    )
    p.add_argument("--nnodes", type=int, default=1, help="with --nccl-env: machines taking part")
    p.add_argument("--node-rank", type=int, default=None, help="with --nccl-env: this machine's rank")
    p.add_argument(
        "--rdzv-endpoint", default=None, help="with --nccl-env: host:port of the rendezvous, between nodes"
    )
    p.add_argument("--json", action="store_true", help="print JSON, for scripts")
    p.set_defaults(run=run)


def check_dtype(torch: Any, index: int, name: str, a: Any, b: Any) -> dict[str, Any]:
    """One matmul on GPU ``index`` in dtype ``name`` against the CPU's float64 product."""
    spec = DTYPES[name]
    dtype = getattr(torch, spec.torch_dtype)
    a, b = a.to(dtype), b.to(dtype)
    reference = a.double() @ b.double()
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(spec.fp32_precision)
    try:
        result = (a.to(f"cuda:{index}") @ b.to(f"cuda:{index}")).cpu().double()
    finally:
        torch.set_float32_matmul_precision(previous)
    error = ((result - reference).norm() / reference.norm()).item()
    return {
        "ok": math.isfinite(error) and error <= spec.tolerance,
        "relative_error": error,
        "tolerance": spec.tolerance,
        "skipped": None,
    }


def check_gpu(torch: Any, index: int) -> dict[str, Any]:
    """Name, memory and the matmul checks of one GPU; an exception fails this GPU only."""
    gpu: dict[str, Any] = {
        "index": index,
        "name": None,
        "capability": None,
        "memory_total_bytes": None,
        "memory_free_bytes": None,
        "matmul": {},
        "ok": False,
        "error": None,
    }
    try:
        props = torch.cuda.get_device_properties(index)
        capability = (props.major, props.minor)
        gpu.update(name=props.name, capability=f"{props.major}.{props.minor}")
        gpu["memory_free_bytes"], gpu["memory_total_bytes"] = torch.cuda.mem_get_info(index)
        generator = torch.Generator().manual_seed(index)
        a = torch.randn(SIZE, SIZE, generator=generator, dtype=torch.float64)
        b = torch.randn(SIZE, SIZE, generator=generator, dtype=torch.float64)
        for name, spec in DTYPES.items():
            if capability < spec.capability:
                gpu["matmul"][name] = {
                    "ok": None,
                    "relative_error": None,
                    "tolerance": spec.tolerance,
                    "skipped": f"needs compute capability {spec.capability[0]}.{spec.capability[1]}",
                }
                continue
            gpu["matmul"][name] = check_dtype(torch, index, name, a, b)
    except Exception as error:  # a CUDA error on one GPU must not hide the others' results
        gpu["error"] = (
            f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        )
        return gpu
    gpu["ok"] = all(check["ok"] is not False for check in gpu["matmul"].values())
    return gpu


def verdict(
    gpus: list[dict[str, Any]], all_reduce: dict[str, Any] | None, min_busbw: float | None
) -> tuple[bool, str]:
    problems = [
        f"GPU {g['index']}: {g['error'] or 'wrong matmul in ' + ', '.join(_wrong(g))}"
        for g in gpus
        if not g["ok"]
    ]
    if all_reduce is not None:
        if not all_reduce["ok"]:
            problems.append(f"all-reduce: {all_reduce['error']}")
        elif min_busbw is not None and all_reduce["bus_bandwidth_gbps"] < min_busbw:
            problems.append(
                f"all-reduce bus bandwidth {all_reduce['bus_bandwidth_gbps']:.1f} GB/s is below "
                f"--min-busbw {min_busbw:g} (NVLink or P2P off? check `nvidia-smi topo -m`)"
            )
    if problems:
        return False, "NOT READY: " + "; ".join(problems)
    text = f"READY: {len(gpus)} GPU{'s' if len(gpus) > 1 else ''} computed correctly in every dtype"
    if all_reduce is not None:
        text += f"; NCCL all-reduce at {all_reduce['bus_bandwidth_gbps']:.1f} GB/s bus bandwidth"
    return True, text


def _wrong(gpu: dict[str, Any]) -> list[str]:
    return [name for name, check in gpu["matmul"].items() if check["ok"] is False]


def render(report: dict[str, Any]) -> str:
    lines = [
        f"jupyter gpu preflight: {len(report['gpus'])} GPU(s), torch {report['torch']}, CUDA {report['cuda']}"
    ]
    for g in report["gpus"]:
        head = f"GPU {g['index']}  {g['name'] or '?'}"
        if g["capability"]:
            head += f"  sm_{g['capability'].replace('.', '')}"
        if g["memory_total_bytes"] is not None:
            head += (
                f"  {format_bytes(g['memory_free_bytes'])} free of {format_bytes(g['memory_total_bytes'])}"
            )
        if g["error"]:
            lines.append(f"{head}  FAIL  {g['error']}")
            continue
        done = {n: c for n, c in g["matmul"].items() if c["skipped"] is None}
        worst = max(done, key=lambda n: done[n]["relative_error"] / done[n]["tolerance"])
        checks = " ".join(n if c["ok"] else f"{n}:WRONG" for n, c in done.items())
        skipped = [n for n in g["matmul"] if n not in done]
        lines.append(
            f"{head}  matmul {checks}"
            + (f" (no {', '.join(skipped)} on this GPU)" if skipped else "")
            + f"  worst error {done[worst]['relative_error']:.1e} ({worst})  {'PASS' if g['ok'] else 'FAIL'}"
        )
    ar = report["all_reduce"]
    if ar is not None:
        head = f"all-reduce across {ar['world_size']} GPUs"
        if ar["nccl_version"]:
            head += f" (NCCL {ar['nccl_version']})"
        if ar["ok"]:
            lines.append(
                f"{head}: {format_bytes(ar['size_bytes'])} in {ar['seconds'] * 1e3:.3f} ms: "
                f"algorithm bandwidth {ar['algorithm_bandwidth_gbps']:.1f} GB/s, "
                f"bus bandwidth {ar['bus_bandwidth_gbps']:.1f} GB/s"
            )
        else:
            lines.append(f"{head}: FAIL  {ar['error']}")
    elif len(report["gpus"]) == 1:
        lines.append("all-reduce: skipped, one GPU")
    lines.append(report["verdict"])
    return "\n".join(lines)


NCCL_ENV_CHECKS = ("nccl_ifname", "gloo_ifname", "nccl_transports", "nccl_errors", "nccl_debug")
IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def _gloo_ifname(env: dict[str, str]) -> str | None:
    """The GLOO_SOCKET_IFNAME that tests the user's interface setting: their own, else the
    interfaces NCCL_SOCKET_IFNAME selects here (gloo takes exact names, NCCL prefixes)."""
    if "GLOO_SOCKET_IFNAME" in env:
        return env["GLOO_SOCKET_IFNAME"]
    if "NCCL_SOCKET_IFNAME" not in env:
        return None
    from ..doctor.netif import nccl_selects, read_interfaces

    up = [i.name for i in read_interfaces() if i.up]
    return ",".join(nccl_selects(env["NCCL_SOCKET_IFNAME"], up)) or env["NCCL_SOCKET_IFNAME"]


def run_nccl_env(args: argparse.Namespace) -> int:
    """All-reduce with the interface settings as they are; exit 3 when NCCL could not be tried."""
    import os

    from ..doctor import diagnose
    from .allreduce import measure

    if args.nnodes < 1 or (args.nnodes > 1) != (args.rdzv_endpoint is not None):
        raise CliError("--nnodes above 1 goes with --rdzv-endpoint host:port (and back)", EXIT_USAGE)
    report = diagnose(check_server=False)
    checks = [c for c in report.checks if c.id in NCCL_ENV_CHECKS]
    settings = {k: os.environ[k] for k in IFNAME_VARS if k in os.environ}
    where = (
        f"{args.nnodes} nodes through {args.rdzv_endpoint}"
        if args.rdzv_endpoint
        else "one node (store on loopback)"
    )
    nodes = dict(nnodes=args.nnodes, node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint)
    common = dict(size_bytes=args.size_mib * 2**20, iterations=args.iters, timeout_s=args.timeout, **nodes)
    lines, code, result = [], EXIT_OK, None
    if report.cuda_ready:
        import torch

        try:
            result = measure(torch.cuda.device_count(), backend="nccl", env=settings, **common)
        except ValueError as error:  # the launcher's own refusal, e.g. no shared secret between nodes
            raise CliError(str(error), EXIT_USAGE) from None
        verdict = "NCCL works with these settings" if result.ok else f"NCCL fails: {result.error}"
        code = EXIT_OK if result.ok else EXIT_FAIL
    else:
        verdict = f"NCCL cannot run here: {report.verdict}"
        code = EXIT_NO_GPU
        ifname = _gloo_ifname(dict(os.environ))
        if ifname is None:
            verdict += "; no NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME to test with gloo instead"
        else:
            try:
                result = measure(2, backend="gloo", env={"GLOO_SOCKET_IFNAME": ifname}, **common)
            except ValueError as error:
                raise CliError(str(error), EXIT_USAGE) from None
            if result.ok:
                verdict += f"; gloo all-reduced through {ifname}, so the interface setting works for gloo"
            else:
                verdict += f"; gloo through {ifname} fails too: {result.error}"
                code = EXIT_FAIL
    if args.json:
        print_json(
            {
                "ok": code == EXIT_OK,
                "verdict": verdict,
                "settings": settings,
                "where": where,
                "checks": [c.id for c in checks],
                "all_reduce": result.to_dict() if result else None,
            }
        )
        return code
    shown = (
        ", ".join(f"{k}={v}" for k, v in settings.items())
        or "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME unset"
    )
    lines.append(f"jupyter gpu preflight --nccl-env: {shown}; {where}")
    lines += [
        f"[{c.status.value.upper():>4}] {c.title}: {c.summary}" + (f"\n       fix: {c.fix}" if c.fix else "")
        for c in checks
    ]
    if result is not None:
        if not result.ok:
            state = f"FAIL  {result.error}"
        elif result.world_size == 1:  # nothing crosses between GPUs, so a bandwidth would read 0
            state = "worked (one rank: no bandwidth to measure)"
        else:
            state = f"{result.bus_bandwidth_gbps:.2f} GB/s bus bandwidth"
        ranks = f"{result.world_size} rank{'s' if result.world_size != 1 else ''}"
        lines.append(f"all-reduce ({result.backend}, {ranks}): {state}")
    lines.append(verdict)
    print("\n".join(lines))
    return code


def run(args: argparse.Namespace) -> int:
    if args.size_mib < 1 or args.iters < 1 or args.timeout <= 0:
        raise CliError("--size-mib and --iters must be at least 1, --timeout positive", EXIT_USAGE)
    if args.nccl_env:
        return run_nccl_env(args)
    reason = no_gpu_reason()
    if reason is not None:
        if args.json:
            print_json(
                {"ok": False, "verdict": reason, "torch": None, "cuda": None, "gpus": [], "all_reduce": None}
            )
            return EXIT_NO_GPU
        raise CliError(f"preflight cannot run: {reason}. Run `jupyter gpu doctor` for the fix.", EXIT_NO_GPU)
    import torch

    gpus = [check_gpu(torch, i) for i in range(torch.cuda.device_count())]
    all_reduce = None
    if len(gpus) > 1 and not args.no_allreduce:
        from .allreduce import measure

        all_reduce = measure(
            len(gpus), size_bytes=args.size_mib * 2**20, iterations=args.iters, timeout_s=args.timeout
        ).to_dict()
    ok, text = verdict(gpus, all_reduce, args.min_busbw)
    report = {
        "ok": ok,
        "verdict": text,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": gpus,
        "all_reduce": all_reduce,
    }
    if args.json:
        print_json(report)
    else:
        print(render(report))
    return EXIT_OK if ok else EXIT_FAIL
