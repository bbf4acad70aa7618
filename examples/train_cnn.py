"""A small CNN trained twice, with torch's modules and with tilec's (same init, same batches).

The data is generated: 16x16 single-channel images holding a bright square in one of four
quadrants plus noise; the label is the quadrant. Run: `python examples/train_cnn.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from training import precision, train


def _tilec_nn():  # imported only when asked for, so the torch half runs on its own
    import tilec.nn

    return tilec.nn


def make_model(kind: str, channels: tuple[int, int] = (8, 16), image: int = 16) -> torch.nn.Module:
    """The example's model (the defaults); `tilec bench train_step` also times a wider one on larger
    images (channels (64, 64), image 32)."""
    nn = torch.nn if kind == "torch" else _tilec_nn()
    c1, c2 = channels
    return torch.nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c1, c2, 3, stride=2, padding=1), nn.ReLU(),
        torch.nn.Flatten(), nn.Linear(c2 * (image // 2) ** 2, 4),
    )


def batches(steps: int, size: int = 32, image: int = 16) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    half = image // 2
    for _ in range(steps):
        labels = torch.randint(0, 4, (size,), generator=gen)
        images = 1.0 * torch.randn(size, 1, image, image, generator=gen)
        for k, label in enumerate(labels.tolist()):
            r, c = (label // 2) * half + 2, (label % 2) * half + 2
            images[k, 0, r:r + 3, c:c + 3] += 0.5
        yield images, labels


if __name__ == "__main__":
    train("CNN", make_model, batches, F.cross_entropy, autocast=precision())
