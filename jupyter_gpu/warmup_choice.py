"""What a notebook will use, read from its source text: the layer families, dtypes and optimizers
that ``%gpu_warmup`` warms (``warmup_steps.py`` maps them to steps).

A warm-up that warms everything costs more than a cold start saves (#32: 9.4 s against 5.7 s on
an H200), so by default it warms only what the notebook names. Pure functions of text: the kernel
side (``kernel/warmup_sources.py``) gathers the notebook's code cells, the kernel's executed cells
and the names of the modules and optimizers it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FAMILIES = ("conv", "norms", "linear", "embedding", "transformer")
OPTIMIZERS = ("SGD", "Adam", "AdamW")
DTYPES = ("fp32", "bf16", "fp16")
MODES = ("foreach", "fused", "for-loop")  # how an optimizer steps: torch's default on CUDA first

_CNN_MODELS = r"\b(?:torchvision\.models|resnet\d*|resnext\w*|vgg\d*|efficientnet\w*|mobilenet\w*|convnext\w*|densenet\d*)"
_HF = r"\b(?:from\s+transformers\s+import|import\s+transformers|AutoModel\w*|GPT\w*|Bert\w*|Llama\w*)"
# (pattern, families it implies). Class names as code and torch.nn.functional spell them.
_FAMILY_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"\bConv(?:Transpose)?[123]d\b|\bconv(?:_transpose)?[123]d\b"), ("conv",)),
    (re.compile(_CNN_MODELS, re.IGNORECASE), ("conv", "norms", "linear")),
    (
        re.compile(
            r"\b(?:BatchNorm[123]d|SyncBatchNorm|LayerNorm|GroupNorm|RMSNorm|InstanceNorm[123]d)\b"
            r"|\b(?:batch|layer|group|rms|instance)_norm\b"
        ),
        ("norms",),
    ),
    (re.compile(r"\b(?:Lazy)?Linear\b|\bBilinear\b|\bF\.linear\b"), ("linear",)),
    (re.compile(r"\bEmbedding(?:Bag)?\b|\bF\.embedding\b"), ("embedding",)),
    (
        re.compile(
            r"\bTransformer(?:Encoder|Decoder)?(?:Layer)?\b|\bMultiheadAttention\b"
            r"|\bscaled_dot_product_attention\b|\bflash_attn\b"
        ),
        ("transformer",),
    ),
    (re.compile(_HF), ("transformer", "embedding", "linear", "norms")),
)
_BF16 = re.compile(r"\bbfloat16\b|\bbf16\b")
_FP16 = re.compile(r"\bfloat16\b|\bfp16\b|\.half\(\)|\btorch\.half\b|\bGradScaler\b")
_AMP_MAGIC = re.compile(r"^\s*%%?amp\b(?!\s+off)(.*)$", re.MULTILINE)  # %%amp and %amp on
_AUTOCAST_CALL = re.compile(r"\bautocast\(([^)]*)\)")
_OPTIMIZER = re.compile(r"\b(SGD|Adam|AdamW)\b")
_OTHER_OPTIMIZER = re.compile(r"\boptim\.(?!SGD\b|Adam\b|AdamW\b|lr_scheduler\b)[A-Z]\w*\(")
_FUSED = re.compile(r"\bfused\s*=\s*True\b")
_FOR_LOOP = re.compile(r"\bforeach\s*=\s*False\b")
_GRAD_SCALER = re.compile(r"\bGradScaler\b")
_CLIP = re.compile(r"\bclip_grad_(?:norm|value)_?\b")


@dataclass(frozen=True)
class Choice:
    """What to warm, and where it was found (for the one-line reason in the report)."""

    families: frozenset[str] = frozenset()
    dtypes: tuple[str, ...] = ("fp32",)  # always fp32 first; bf16 becomes fp16 on GPUs without it
    optimizers: tuple[str, ...] = ()  # the ones with a step of their own (OPTIMIZERS)
    optimizer_import: bool = False  # some optimizer is used: its first constructor imports torch._dynamo
    modes: tuple[str, ...] = ("foreach",)
    grad_scaler: bool = False
    clip: bool = False
    linears: tuple[tuple[int, int], ...] = ()  # nn.Linear(in, out) sizes written in the notebook
    everything: bool = False
    origins: tuple[str, ...] = field(default=(), compare=False)
    looked_at: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def all(cls) -> Choice:
        """``--all``: every family, fp32 and half precision, every optimizer in every mode."""
        return cls(
            frozenset(FAMILIES),
            ("fp32", "bf16"),
            OPTIMIZERS,
            optimizer_import=True,
            modes=("foreach", "fused"),
            grad_scaler=True,
            clip=True,
            everything=True,
        )

    @property
    def basics_only(self) -> bool:
        return not (self.families or self.optimizer_import or self.grad_scaler or self.dtypes != ("fp32",))

    def describe(self) -> str:
        """One line: what is warmed and why, e.g. ``warming conv, linear, SGD in fp32: named in
        finetune.ipynb; --all for everything``."""
        if self.everything:
            return (
                "warming everything (--all): every layer family, fp32 and half precision, SGD, Adam and AdamW"
            )
        if self.basics_only:
            why = (
                f"no layer, optimizer or half precision named in {_join(self.looked_at)}"
                if self.looked_at
                else "no notebook found and no cell run yet"
            )
            return f"warming the basics (context, elementwise, fp32 matmul): {why}; --all for everything"
        what = [f for f in FAMILIES if f in self.families]
        if self.linears and "linear" in what:
            sizes = ", ".join(f"{i}x{o}" for i, o in self.linears[:4]) + (
                ", ..." if len(self.linears) > 4 else ""
            )
            what[what.index("linear")] = f"linear ({sizes})"
        modes = f" ({', '.join(self.modes)})" if self.modes != ("foreach",) else ""
        what += [f"{name}{modes}" for name in self.optimizers]
        if self.optimizer_import and not self.optimizers:
            what.append("the optimizer import")
        if self.grad_scaler:
            what.append("GradScaler")
        dtypes = " and ".join(self.dtypes)
        return f"warming {', '.join(what) or 'the basics'} in {dtypes}: named in {_join(self.origins)}; --all for everything"


def _join(names: tuple[str, ...]) -> str:
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def choose(sources: dict[str, str]) -> Choice:
    """What to warm for these sources (where -> text, e.g. ``{"finetune.ipynb": code}``)."""
    families: set[str] = set()
    dtypes: set[str] = set()
    optimizers: set[str] = set()
    modes: set[str] = set()
    flags = {"import": False, "scaler": False, "clip": False}
    linears: set[tuple[int, int]] = set()
    origins: list[str] = []
    for origin, text in sources.items():
        found = _read(text)
        if any(found.values()):
            origins.append(origin)
        families |= found["families"]
        dtypes |= found["dtypes"]
        optimizers |= found["optimizers"]
        modes |= found["modes"]
        flags["import"] |= bool(found["optimizers"] or found["other_optimizer"])
        flags["scaler"] |= bool(found["scaler"])
        flags["clip"] |= bool(found["clip"])
        linears |= linear_sizes(text)
    return Choice(
        frozenset(families),
        tuple(d for d in DTYPES if d == "fp32" or d in dtypes),
        tuple(o for o in OPTIMIZERS if o in optimizers),
        optimizer_import=flags["import"],
        modes=tuple(m for m in MODES if m in modes) or ("foreach",),
        grad_scaler=flags["scaler"],
        clip=flags["clip"] and flags["import"],
        linears=tuple(sorted(linears))[:MAX_LINEARS],
        origins=tuple(origins),
        looked_at=tuple(sources),
    )


MAX_LINEARS = 32
# Each size: digits, '*' and '+' between digits, bounded (a long run of spaces in an unbounded
# pattern made the match cubic: minutes for a line of a hostile notebook).
_LINEAR = re.compile(r"\bLinear\(\s*(\d(?:[\d \t*+]{0,40}\d)?)\s*,\s*(\d(?:[\d \t*+]{0,40}\d)?)\s*[,)]")
MAX_WEIGHT = 1 << 26  # elements of one warmed layer (256 MiB in fp32): a size no text can inflate


def _size(expression: str) -> int | None:
    """A size written as digits, products and sums (``128 * 256``), else None; computed term by
    term with a bound, never evaluated as Python (``9**9**9`` is no size)."""
    total = 0
    for term in expression.split("+"):
        product = 1
        for factor in term.split("*"):
            factor = factor.strip()
            if not (factor.isascii() and factor.isdigit()) or len(factor) > 7:
                return None
            product *= int(factor)
            if product > 1 << 20:
                return None
        total += product
    return total if 0 < total <= 1 << 20 else None


def linear_sizes(text: str) -> set[tuple[int, int]]:
    """``nn.Linear(in, out)`` sizes the source writes as numbers: cuBLAS picks its kernels by
    shape, so warming these (rather than a list of common widths) loads what the model will."""
    found = set()
    for fan_in, fan_out in _LINEAR.findall(text):
        sizes = (_size(fan_in), _size(fan_out))
        if sizes[0] and sizes[1] and sizes[0] * sizes[1] <= MAX_WEIGHT:
            found.add((sizes[0], sizes[1]))
    return found


def _read(text: str) -> dict[str, set[str]]:
    """What one source names; every value a set, empty when it names nothing of that kind."""
    families = {f for pattern, implied in _FAMILY_PATTERNS if pattern.search(text) for f in implied}
    dtypes = {"bf16"} if _BF16.search(text) else set()
    if _FP16.search(text):
        dtypes.add("fp16")
    for options in _AMP_MAGIC.findall(text):  # %%amp's default is bf16 (fp16 where the GPU lacks it)
        dtypes.add("fp16" if re.search(r"--dtype[= ]+fp16", options) else "bf16")
    for arguments in _AUTOCAST_CALL.findall(text):
        if "dtype" not in arguments and "cpu" not in arguments:
            dtypes.add("fp16")  # torch.autocast("cuda") without a dtype: torch's default, fp16
    optimizers = set(_OPTIMIZER.findall(text))
    modes = {"fused"} if _FUSED.search(text) else set()
    if _FOR_LOOP.search(text):
        modes.add("for-loop")
    if optimizers and not modes:
        modes.add("foreach")
    return {
        "families": families,
        "dtypes": dtypes,
        "optimizers": optimizers,
        "other_optimizer": {"yes"} if _OTHER_OPTIMIZER.search(text) else set(),
        "modes": modes if optimizers or _OTHER_OPTIMIZER.search(text) else set(),
        "scaler": {"yes"} if _GRAD_SCALER.search(text) else set(),
        "clip": {"yes"} if _CLIP.search(text) else set(),
    }
