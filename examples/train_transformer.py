"""A small transformer block trained twice, with torch's modules and with tilec's.

Task (generated): continue a sequence that repeats a random pattern of period 4 over a
vocabulary of 16 tokens; causal self-attention must look back one period to predict the next
token. Run: `python examples/train_transformer.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from training import train


def _tilec_nn():  # imported only when asked for, so the torch half runs on its own
    import tilec.nn

    return tilec.nn

VOCAB, SEQ, DIM, HEADS = 16, 16, 32, 4


class Block(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        nn = torch.nn if kind == "torch" else _tilec_nn()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.position = torch.nn.Parameter(0.02 * torch.randn(SEQ, DIM))
        self.norm1 = nn.LayerNorm(DIM)
        self.attention = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.norm2 = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 2 * DIM)
        self.act = nn.GELU()
        self.down = nn.Linear(2 * DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB)
        self.causal = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        h = self.norm1(x)
        a, _ = self.attention(h, h, h, need_weights=False, attn_mask=self.causal, is_causal=True)
        x = x + a
        x = x + self.down(self.act(self.up(self.norm2(x))))
        return self.head(x)


def batches(steps: int, size: int = 16) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(2)
    for _ in range(steps):
        pattern = torch.randint(0, VOCAB, (size, 4), generator=gen)
        seq = pattern.repeat(1, (SEQ + 1) // 4 + 1)[:, :SEQ + 1]
        yield seq[:, :-1], seq[:, 1:]


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


if __name__ == "__main__":
    train("transformer", Block, batches, loss_fn, lr=0.3)
