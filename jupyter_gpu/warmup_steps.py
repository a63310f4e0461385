"""The warm-up's steps, one per family of kernels, chosen by a ``warmup_choice.Choice``.

Under lazy module loading each kernel family loads on first use; cuBLAS, cuBLASLt, cuDNN and
attention build handles and choose algorithms on their first call, and they choose by shape, so
each step trains small models of the shapes first notebooks use (CIFAR/MNIST-sized CNNs, MLPs,
small transformers), forward and backward, in fp32 and in each half dtype chosen. The first
optimizer constructor imports ``torch._dynamo`` (seconds of CPU).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .warmup_choice import Choice

Action = Callable[[], None]

_IMAGES = ((3, 32, 64), (3, 32, 16), (1, 28, 64))  # (channels, size, batch)
_WIDTHS = (64, 128, 256, 512, 1024)
_LINEARS = (
    *[(i, o) for i in _WIDTHS for o in (*_WIDTHS, 10)],
    (784, 256),
    (784, 512),
    (4096, 4096),
    (8192, 10),
    (32768, 10),  # a flattened feature map into a classifier head
)
_TRANSFORMERS = ((256, 8, 1024, 128, 32, "relu", False), (512, 8, 2048, 128, 16, "gelu", True))


@dataclass
class _Kit:
    """One device's tensors and training loop, in the dtypes chosen. Inputs and labels come from a
    generator of its own; models built on the device draw their first weights (and dropout)
    from the device's default generator, which the warm-up puts back after each step."""

    torch: Any
    dev: Any
    halves: list[Any]  # the half dtypes to autocast to, as this GPU has them
    linears: tuple[tuple[int, int], ...] = ()  # the notebook's own linear sizes, if it writes them

    @functools.cached_property
    def gen(self) -> Any:
        """The kit's own generator, made by the first step that draws (on the device's thread)."""
        return self.torch.Generator(device=self.dev)

    def randn(self, *shape: int, dtype: Any = None) -> Any:
        return self.torch.randn(
            *shape, device=self.dev, dtype=dtype or self.torch.float32, generator=self.gen
        )

    def labels(self, n: int, classes: int = 10) -> Any:
        return self.torch.randint(0, classes, (n,), device=self.dev, generator=self.gen)

    def train(self, model: Any, x: Any, y: Any) -> None:
        """Forward, cross-entropy and backward in fp32 and under autocast to each half dtype."""
        for dtype in [None, *self.halves]:
            with self.torch.autocast("cuda", dtype=dtype or self.torch.float16, enabled=dtype is not None):
                loss = self.torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()


def _cnns(kit: _Kit) -> None:
    nn = kit.torch.nn
    for channels, size, batch in _IMAGES:
        model = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        ).to(kit.dev)
        kit.train(model, kit.randn(batch, channels, size, size), kit.labels(batch))
    resnet = nn.Sequential(  # strided, 1x1 and 7x7 convs, group norm, average pooling
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False),
        nn.GroupNorm(8, 128),
        nn.SiLU(),
        nn.Conv2d(128, 256, 1, bias=False),
        nn.BatchNorm2d(256),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(256 * 4 * 4, 10),
    ).to(kit.dev)
    kit.train(resnet, kit.randn(16, 3, 64, 64), kit.labels(16))


def _norms(kit: _Kit) -> None:
    nn = kit.torch.nn
    for norm, shape in (
        (nn.BatchNorm1d(256), (64, 256)),
        (nn.LayerNorm(256), (64, 256)),
        (nn.BatchNorm2d(32), (16, 32, 16, 16)),
        (nn.GroupNorm(8, 32), (16, 32, 16, 16)),
    ):
        model = nn.Sequential(norm, nn.Flatten(), nn.Linear(math.prod(shape[1:]), 10)).to(kit.dev)
        kit.train(model, kit.randn(*shape), kit.labels(shape[0]))


def _linears(kit: _Kit) -> None:
    nn = kit.torch.nn
    for batch in (64, 256):
        for fan_in, fan_out in kit.linears or _LINEARS:
            layer = nn.Linear(fan_in, fan_out, device=kit.dev)
            head = nn.Linear(fan_out, 10, device=kit.dev) if fan_out != 10 else nn.Identity()
            kit.train(nn.Sequential(layer, nn.ReLU(), head), kit.randn(batch, fan_in), kit.labels(batch))
    if kit.linears:
        return  # the notebook's own layers: not the activations and norms of a made-up MLP
    mlp = nn.Sequential(
        nn.Linear(512, 512), nn.GELU(), nn.LayerNorm(512), nn.Dropout(0.1), nn.Tanh(), nn.Linear(512, 10)
    ).to(kit.dev)
    kit.train(mlp, kit.randn(64, 512), kit.labels(64))


def _embeddings(kit: _Kit) -> None:
    nn = kit.torch.nn
    for vocab, d, batch, seq in ((1000, 256, 32, 128), (30522, 512, 8, 128)):
        model = nn.Sequential(nn.Embedding(vocab, d), nn.Linear(d, 1000), nn.Flatten(0, 1)).to(kit.dev)
        tokens = kit.torch.randint(0, vocab, (batch, seq), device=kit.dev, generator=kit.gen)
        kit.train(model, tokens, kit.labels(batch * seq, 1000))


def _transformers(kit: _Kit) -> None:
    nn = kit.torch.nn
    for d, heads, ff, seq, batch, activation, norm_first in _TRANSFORMERS:
        model = nn.Sequential(
            nn.Embedding(1000, d),
            nn.TransformerEncoderLayer(
                d, heads, ff, batch_first=True, activation=activation, norm_first=norm_first
            ),
            nn.Linear(d, 1000),
            nn.Flatten(0, 1),  # one prediction per token
        ).to(kit.dev)
        tokens = kit.torch.randint(0, 1000, (batch, seq), device=kit.dev, generator=kit.gen)
        kit.train(model, tokens, kit.labels(batch * seq, 1000))
    for dtype in kit.halves or [kit.torch.float32]:
        q = kit.randn(2, 4, 128, 64, dtype=dtype)
        kit.torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


_VARIANTS: dict[str, tuple[dict[str, Any], ...]] = {
    "SGD": (
        {"lr": 0.1},
        {"lr": 0.1, "momentum": 0.9},
        {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
    ),
    "Adam": ({}, {"weight_decay": 1e-4}),
    "AdamW": ({},),
}
_MODE_OPTIONS: dict[str, dict[str, bool]] = {
    "foreach": {},
    "fused": {"fused": True},
    "for-loop": {"foreach": False},
}


def _optimizers(kit: _Kit, choice: Choice) -> Action:
    """Each chosen optimizer's first step (state creation) and second (the steady path), per mode;
    SGD alone when the notebook uses another optimizer (its constructor's import is the cost)."""
    torch = kit.torch
    names = choice.optimizers or ("SGD",)
    grids = [(torch.float32, mode) for mode in choice.modes]
    if choice.everything:
        grids.append((kit.halves[0] if kit.halves else torch.float16, "foreach"))

    def run() -> None:
        for dtype, mode in grids:
            params = [torch.nn.Parameter(kit.randn(n, dtype=dtype)) for n in (10, 1000, 100_000)]
            for name in names:
                for options in _VARIANTS[name]:
                    opt = getattr(torch.optim, name)(params, **options, **_MODE_OPTIONS[mode])
                    for _ in range(2):
                        for p in params:
                            p.grad = kit.randn(*p.shape, dtype=p.dtype)
                        if choice.clip:
                            torch.nn.utils.clip_grad_norm_(params, 1.0)
                        opt.step()
                    opt.zero_grad(set_to_none=False)

    return run


def _grad_scaler(kit: _Kit) -> None:
    torch = kit.torch
    model = torch.nn.utils.skip_init(torch.nn.Linear, 64, 10, device=kit.dev)  # no draw from the device's
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(kit.randn(*p.shape) * 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(kit.randn(64, 64)), kit.labels(64))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


_FAMILY_STEPS: tuple[tuple[str, str, Callable[[_Kit], None]], ...] = (
    ("conv", "CNN training steps: conv, norms, pooling, cross-entropy", _cnns),
    ("norms", "batch, layer and group norms, forward + backward", _norms),
    ("linear", "linear layers of common widths, forward + backward", _linears),
    ("embedding", "embeddings into a linear head, forward + backward", _embeddings),
    ("transformer", "transformer encoder blocks and scaled-dot-product attention", _transformers),
)


# cuDNN keeps its handle per thread, and PyTorch its cuDNN convolution and attention plans in
# thread-local caches: on an H200 the kernel's main thread paid 43 ms in its first cuDNN
# attention call after a background thread had run the same one. These families are run again
# on the main thread after a background warm-up.
PER_THREAD_FAMILIES = frozenset({"conv", "norms", "transformer"})


def _kit(torch: Any, index: int, choice: Choice) -> _Kit:
    has_bf16 = torch.cuda.get_device_capability(index)[0] >= 8
    named = {"bf16": torch.bfloat16 if has_bf16 else torch.float16, "fp16": torch.float16}
    halves = list(dict.fromkeys(named[d] for d in choice.dtypes if d != "fp32"))
    return _Kit(torch, torch.device("cuda", index), halves, choice.linears)


def family_steps(
    torch: Any, index: int, choice: Choice, families: frozenset[str]
) -> list[tuple[str, Action]]:
    """The chosen layer families among ``families``, as (label, action) pairs."""
    kit = _kit(torch, index, choice)
    in_dtypes = f" ({', '.join(_name(d) for d in [torch.float32, *kit.halves])})"
    return [
        (label + in_dtypes, functools.partial(_on_device, run, kit))
        for family, label, run in _FAMILY_STEPS
        if family in choice.families and family in families
    ]


def optimizer_steps(torch: Any, index: int, choice: Choice) -> list[tuple[str, Action]]:
    """The chosen optimizers' steps and the GradScaler's: their first constructor imports
    torch._dynamo, seconds of CPU and no CUDA, which ``%gpu_warmup`` leaves to the background.
    They draw only from the kit's generator: a cell that runs beside them (its wait for the step
    in flight interrupted) keeps every random number it draws."""
    kit = _kit(torch, index, choice)
    steps: list[tuple[str, Action]] = []
    if choice.optimizer_import:
        label = ", ".join(choice.optimizers or ("SGD",)) + f" ({', '.join(choice.modes)})"
        steps.append(
            (
                f"optimizers: {label}, first and later steps (the first imports torch._dynamo)",
                _optimizers(kit, choice),
            )
        )
    if choice.grad_scaler:
        steps.append(("fp16 GradScaler step", functools.partial(_grad_scaler, kit)))
    return steps


def steps_for(
    torch: Any, index: int, choice: Choice, nccl: bool, compile: bool, optimizers: bool = True
) -> list[tuple[str, Action]]:
    """The warm-up for one device, as (label, action) pairs; each action touches one family.
    ``optimizers=False`` leaves out ``optimizer_steps``."""
    kit = _kit(torch, index, choice)
    dev, halves = kit.dev, kit.halves
    matmuls = list(dict.fromkeys([torch.float32, *halves, *([torch.float16] if choice.grad_scaler else [])]))

    def elementwise() -> None:
        x = kit.randn(1 << 16)
        (x * 2 + 1).relu_().sum().item()
        torch.rand(1024, device=dev, generator=kit.gen).max().item()

    def matmul(dtype: Any) -> Action:
        return lambda: kit.randn(256, 256, dtype=dtype) @ kit.randn(256, 256, dtype=dtype)

    steps: list[tuple[str, Action]] = [
        ("context", lambda: torch.empty(1, device=dev)),
        ("elementwise, reduction, RNG", elementwise),
        *[(f"matmul {_name(d)} (cuBLAS)", matmul(d)) for d in matmuls],
    ]
    if optimizers:
        steps += optimizer_steps(torch, index, choice)
    steps += family_steps(torch, index, choice, frozenset(choice.families))
    if nccl:
        steps.append(
            (
                "NCCL communicator (this process only)",
                lambda: torch.cuda.nccl.all_reduce([torch.ones(1, device=dev)]),
            )
        )
    if compile:
        steps.append(
            (
                "torch.compile (Dynamo, Inductor, Triton)",
                lambda: torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1)(kit.randn(64, 64)),
            )
        )
    return steps


def _on_device(run: Callable[[_Kit], None], kit: _Kit) -> None:
    """Models built on the device draw their initial weights from its generator, not the CPU's
    (the warm-up restores the device's after each step, and the CPU's is shared by every
    device's thread). Optimizers are left out: their state would move to the device too."""
    with kit.torch.device(kit.dev):
        run(kit)


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
