"""What cuDNN's convolutions allocate beyond their results: the workspaces %gpu_plan cannot see.

    python benchmarks/conv_workspace.py [--batch 64] [--size 224] [--json]

Fake tensors run no cuDNN, so a plan sees a convolution's inputs and outputs but not the
workspace cuDNN's chosen algorithm asks PyTorch's allocator for. This measures it on the GPU,
per convolution and pass (forward; backward for the input's gradient and the weight's), in fp32
and bf16, with PyTorch's defaults (``cudnn.benchmark`` off): the peak of
``torch.cuda.max_memory_allocated()`` during the call, less what was allocated before and the
call's own results. The table compares it with the convolution's input and output sizes, which
is what the plan's workspace estimate is drawn from.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# (in channels, out channels, stride, input size divisor): the test CNN's three convolutions and
# the 7x7 / 1x1 shapes of a ResNet's stem and bottleneck.
SHAPES = [
    (3, 64, 3, 1, 1),
    (64, 128, 3, 2, 1),
    (128, 128, 3, 1, 2),
    (3, 64, 7, 2, 1),
    (256, 64, 1, 1, 4),
    (64, 64, 3, 1, 4),
]


def measure(torch: Any, batch: int, size: int, shape: tuple[int, ...], dtype: Any) -> dict[str, Any]:
    """Transient bytes of one convolution's forward and backward, beyond inputs and results."""
    cin, cout, kernel, stride, divisor = shape
    dev = torch.device("cuda")
    side = size // divisor
    x = torch.randn(batch, cin, side, side, device=dev, dtype=dtype)
    w = torch.randn(cout, cin, kernel, kernel, device=dev, dtype=dtype)
    padding = [kernel // 2] * 2

    def transient(call: Any) -> tuple[int, list[Any]]:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        results = [r for r in call() if r is not None]
        torch.cuda.synchronize()
        kept = sum(r.untyped_storage().nbytes() for r in results)
        return torch.cuda.max_memory_allocated() - before - kept, results

    forward, (out,) = transient(lambda: [torch.nn.functional.conv2d(x, w, None, stride, padding)])
    grad = torch.randn_like(out)
    backward: dict[str, int] = {}
    for label, mask in (("input", [True, False, False]), ("weight", [False, True, False])):
        backward[label], _ = transient(
            lambda m=mask: torch.ops.aten.convolution_backward(
                grad, x, w, None, [stride] * 2, padding, [1, 1], False, [0, 0], 1, m
            )
        )
    return {
        "shape": f"{cin}->{cout} k{kernel} s{stride} at {side}x{side}",
        "dtype": str(dtype).removeprefix("torch."),
        "input_bytes": x.nbytes,
        "output_bytes": out.nbytes,
        "forward_bytes": forward,
        "backward_input_bytes": backward["input"],
        "backward_weight_bytes": backward["weight"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("no usable GPU: cuDNN's workspaces exist only on one")
    rows = [
        measure(torch, args.batch, args.size, shape, dtype)
        for dtype in (torch.float32, torch.bfloat16)
        for shape in SHAPES
    ]
    mib = 2**20
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
        f"batch {args.batch}, {args.size}x{args.size}; MiB beyond inputs and results"
    )
    header = ["convolution", "dtype", "input", "output", "forward", "grad input", "grad weight"]
    print(" | ".join(header))
    print(" | ".join("-" * len(h) for h in header))
    for r in rows:
        print(
            " | ".join(
                [r["shape"], r["dtype"]]
                + [
                    f"{r[k] / mib:,.1f}"
                    for k in (
                        "input_bytes",
                        "output_bytes",
                        "forward_bytes",
                        "backward_input_bytes",
                        "backward_weight_bytes",
                    )
                ]
            )
        )
    if args.json:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
