"""Benchmark %%amp: its overhead against a bare torch.autocast block, and its speed-up over fp32.

    python benchmarks/amp.py [--device auto|cuda|cpu] [--repeats 30]

The same training step (an MLP: forward, loss, backward, AdamW) runs as three cells through one
IPython shell, interleaved: plain fp32; `with torch.autocast(...)`; and `%%amp`. Each cell is
timed around `shell.run_cell` after synchronising the device, so all three pay IPython's own cost.
On the CPU it still runs (labelled): the overhead figure is meaningful, the speed-up is not a GPU's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

SETUP = """\
import torch
nn, F = torch.nn, torch.nn.functional
dev = torch.device({device!r})
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear({width}, {width}), nn.GELU())], nn.Linear({width}, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters())
x = torch.randn({batch}, {width}, device=dev)
y = torch.randint(0, 10, ({batch},), device=dev)

def step():
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    import torch
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu.kernel import amp

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        from jupyter_gpu.doctor import diagnose

        print(f"no GPU for --device cuda. {diagnose(check_server=False).verdict}")
        return
    settings = amp.resolve(device, "auto", None)
    torch_dtype = getattr(torch, amp._TORCH_DTYPES[settings.dtype])
    width, batch = (4096, 256) if device == "cuda" else (512, 64)

    shell = InteractiveShell.instance()
    amp.register(shell)
    shell.run_cell(SETUP.format(device=device, width=width, batch=batch))
    cells = {
        "fp32": "step()",
        "with torch.autocast": f"with torch.autocast({device!r}, dtype={torch_dtype}):\n    step()",
        "%%amp": f"%%amp --device {device} --dtype {settings.dtype}\nstep()",
    }
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in cells}
    with contextlib.redirect_stdout(io.StringIO()):  # the %%amp summary line, for every arm alike
        for repeat in range(args.repeats + 3):
            for name, code in cells.items():
                sync()
                start = time.perf_counter()
                result = shell.run_cell(code, store_history=False)
                sync()
                if not result.success:
                    result.raise_error()
                if repeat >= 3:  # the first rounds load kernels and allocate
                    times[name].append((time.perf_counter() - start) * 1e3)

    med = {name: statistics.median(v) for name, v in times.items()}
    label = torch.cuda.get_device_name() if device == "cuda" else "CPU (no GPU: speed-up not representative)"
    print(
        f"\n%%amp vs torch.autocast, {settings.dtype} on {label}; MLP {width} wide, batch {batch}; "
        f"median of {args.repeats} interleaved cells"
    )
    print(f"{'cell':<22} | {'median ms':>10} | {'vs fp32':>8}")
    for name, ms in med.items():
        print(f"{name:<22} | {ms:>10.3f} | {med['fp32'] / ms:>7.2f}×")
    extra = med["%%amp"] - med["with torch.autocast"]
    print(
        f"%%amp over a bare autocast block: {extra:+.3f} ms per cell ({extra / med['with torch.autocast'] * 100:+.1f}%)."
        " %%amp waits for the device to report true wall time, so IPython's own per-cell work no longer"
        " overlaps the GPU's; the cost is per cell, not per step."
    )


if __name__ == "__main__":
    main()
