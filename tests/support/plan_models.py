"""Small models for the %gpu_plan tests (CPU and GPU): a GPT-style transformer (blocks in an
nn.ModuleList, scaled_dot_product_attention), a CNN and an MLP. Built wherever torch's default
device says (``with torch.device("meta")`` builds them without memory)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(w, dim=2)
        q, k, v = (t.view(b, s, self.heads, w // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, w))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(
        self, vocab: int = 512, width: int = 128, depth: int = 2, heads: int = 4, context: int = 256
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        self.layers = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x))


def cnn(channels: int = 64, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1, stride=2),
        nn.BatchNorm2d(2 * channels),
        nn.ReLU(),
        nn.Conv2d(2 * channels, 2 * channels, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * channels, classes),
    )


def mlp(width: int = 1024, depth: int = 4, inputs: int = 784, classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(inputs, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))
