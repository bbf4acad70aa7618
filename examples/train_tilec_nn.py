"""A model built from tilec.nn modules only, trained twice: with torch.nn's modules and with
tilec's (same init, same batches), printing both loss curves.

Every layer is a tilec.nn module: Embedding, Conv2d, BatchNorm2d, ReLU, MaxPool2d,
MultiheadAttention, AdaptiveAvgPool2d, Linear, and the CrossEntropyLoss. The data is generated:
8x8 grids of tokens (vocabulary 16) holding, at a random place, a 2x2 block of one of four marker
tokens; the label is the marker. Run: `python examples/train_tilec_nn.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from training import precision, train

VOCABULARY, MARKERS, GRID = 16, 4, 8


def _nn(kind: str) -> Any:
    if kind == "torch":
        return torch.nn
    import tilec.nn  # imported only when asked for, so the torch half runs on its own

    return tilec.nn


class TokenGridClassifier(torch.nn.Module):
    """tokens [B, 8, 8] -> embedding [B, E, 8, 8] -> conv, batch norm, ReLU -> 2x2 max pool
    [B, C, 4, 4] -> self-attention over the 16 positions -> average pool -> logits [B, 4]."""

    def __init__(self, kind: str, embed: int = 8, channels: int = 16, heads: int = 2) -> None:
        super().__init__()
        nn = _nn(kind)
        self.embedding = nn.Embedding(VOCABULARY, embed)
        self.conv = nn.Conv2d(embed, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.attention = nn.MultiheadAttention(channels, heads, batch_first=True)
        self.average = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, MARKERS)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens).permute(0, 3, 1, 2)           # [B, E, 8, 8]
        x = self.pool(self.relu(self.norm(self.conv(x))))       # [B, C, 4, 4]
        b, c, h, w = x.shape
        seq = x.flatten(2).transpose(1, 2)                      # [B, 16, C]
        attended, _ = self.attention(seq, seq, seq, need_weights=False)
        x = attended.transpose(1, 2).reshape(b, c, h, w)
        return self.head(self.average(x).flatten(1))            # [B, 4]


def make_model(kind: str) -> TokenGridClassifier:
    return TokenGridClassifier(kind)


def batches(steps: int, size: int = 32) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    for _ in range(steps):
        tokens = torch.randint(MARKERS, VOCABULARY, (size, GRID, GRID), generator=gen)
        labels = torch.randint(0, MARKERS, (size,), generator=gen)
        corners = torch.randint(0, GRID - 1, (size, 2), generator=gen)
        for k, (label, (r, c)) in enumerate(zip(labels.tolist(), corners.tolist())):
            tokens[k, r:r + 2, c:c + 2] = label
        yield tokens, labels


def loss_of(model: torch.nn.Module, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The model's own CrossEntropyLoss module (tilec's in the tilec copy)."""
    assert isinstance(model, TokenGridClassifier)
    return model.loss(logits, labels)


if __name__ == "__main__":
    train("token-grid classifier (tilec.nn only)", make_model, batches, None, model_loss=loss_of, steps=150, lr=0.05,
          autocast=precision())
