"""The knob record of the tensor-core (WMMA) GEMM template, tilec.schedule.gpu.tensorcore: block
tile and warp grid, with the constraints the WMMA fragments impose."""

from __future__ import annotations

from dataclasses import dataclass

from tilec.errors import ScheduleError


@dataclass(frozen=True)
class WmmaGemmConfig:
    """The knobs: block tile (block_m, block_n, block_k) and the warp grid inside a block."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2

    def check(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            if getattr(self, name) <= 0 or getattr(self, name) % 16:
                raise ScheduleError(f"{name} = {getattr(self, name)} must be a positive multiple of 16")
        if self.block_m % (16 * self.warps_m) or self.block_n % (16 * self.warps_n):
            raise ScheduleError(f"each of the {self.warps_m}x{self.warps_n} warps needs a whole number of 16x16 "
                                f"fragments of the {self.block_m}x{self.block_n} block tile")
        if not 1 <= 32 * self.warps_m * self.warps_n <= 1024:
            raise ScheduleError(f"{self.warps_m * self.warps_n} warps per block: CUDA allows 1 to 32")
