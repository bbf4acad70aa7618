"""A small transformer block trained twice, with torch's modules and with tilec's.

Task (generated): continue a sequence that repeats a random pattern of period 4 over a
vocabulary of 16 tokens; causal self-attention must look back one period to predict the next
token. Run: `python examples/train_transformer.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from training import precision, train


def _tilec_nn():  # imported only when asked for, so the torch half runs on its own
    import tilec.nn

    return tilec.nn

VOCAB, SEQ, DIM, HEADS = 16, 16, 32, 4


class Block(torch.nn.Module):
    """The example's model (the defaults); `tilec bench train_step` also times a wider one
    (dim 256, seq 128, 8 heads)."""

    def __init__(self, kind: str, dim: int = DIM, seq: int = SEQ, heads: int = HEADS) -> None:
        super().__init__()
        nn = torch.nn if kind == "torch" else _tilec_nn()
        self.embed = torch.nn.Embedding(VOCAB, dim)
        self.position = torch.nn.Parameter(0.02 * torch.randn(seq, dim))
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.act = nn.GELU()
        self.down = nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, VOCAB)
        self.causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        h = self.norm1(x)
        a, _ = self.attention(h, h, h, need_weights=False, attn_mask=self.causal, is_causal=True)
        x = x + a
        x = x + self.down(self.act(self.up(self.norm2(x))))
        return self.head(x)


def batches(steps: int, size: int = 16, length: int = SEQ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(2)
    for _ in range(steps):
        pattern = torch.randint(0, VOCAB, (size, 4), generator=gen)
        seq = pattern.repeat(1, (length + 1) // 4 + 1)[:, :length + 1]
        yield seq[:, :-1], seq[:, 1:]


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


if __name__ == "__main__":
    train("transformer", Block, batches, loss_fn, lr=0.3, autocast=precision())
