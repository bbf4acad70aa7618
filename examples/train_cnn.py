"""A small CNN trained twice, with torch's modules and with tilec's (same init, same batches).

The data is generated: 16x16 single-channel images holding a bright square in one of four
quadrants plus noise; the label is the quadrant. Run: `python examples/train_cnn.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from training import train


def _tilec_nn():  # imported only when asked for, so the torch half runs on its own
    import tilec.nn

    return tilec.nn


def make_model(kind: str) -> torch.nn.Module:
    nn = torch.nn if kind == "torch" else _tilec_nn()
    return torch.nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        torch.nn.Flatten(), nn.Linear(16 * 8 * 8, 4),
    )


def batches(steps: int, size: int = 32) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        labels = torch.randint(0, 4, (size,), generator=gen)
        images = 1.0 * torch.randn(size, 1, 16, 16, generator=gen)
        for k, label in enumerate(labels.tolist()):
            r, c = (label // 2) * 8 + 2, (label % 2) * 8 + 2
            images[k, 0, r:r + 3, c:c + 3] += 0.5
        yield images, labels


if __name__ == "__main__":
    train("CNN", make_model, batches, F.cross_entropy)
