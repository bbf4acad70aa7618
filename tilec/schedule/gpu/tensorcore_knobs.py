"""The knob record of the tensor-core (WMMA) GEMM template, tilec.schedule.gpu.tensorcore: block
tile and warp grid, with the constraints the WMMA fragments impose."""

from __future__ import annotations

from dataclasses import dataclass

from tilec.schedule.templates.knobs import knob


@dataclass(frozen=True)
class WmmaGemmConfig:
    """The knobs: block tile (block_m, block_n, block_k) and the warp grid inside a block."""

    block_m: int = knob(64, 16, 1024, "rows of the block tile, a multiple of 16 x warps_m")
    block_n: int = knob(64, 16, 1024, "columns of the block tile, a multiple of 16 x warps_n")
    block_k: int = knob(32, 16, 1024, "reduction step, a multiple of 16")
    warps_m: int = knob(2, 1, 32, "warps along the rows")
    warps_n: int = knob(2, 1, 32, "warps along the columns")

    def problems(self, max_threads: int) -> list[str]:
        """What the WMMA fragments and a block of at most `max_threads` threads rule out."""
        out = []
        for name in ("block_m", "block_n", "block_k"):
            if getattr(self, name) <= 0 or getattr(self, name) % 16:
                out.append(f"{name} = {getattr(self, name)} must be a positive multiple of 16")
        if self.block_m % (16 * self.warps_m) or self.block_n % (16 * self.warps_n):
            out.append(f"each of the {self.warps_m}x{self.warps_n} warps needs a whole number of 16x16 "
                       f"fragments of the {self.block_m}x{self.block_n} block tile")
        if not 1 <= 32 * self.warps_m * self.warps_n <= max_threads:
            out.append(f"{self.warps_m * self.warps_n} warps per block: CUDA allows 1 to {max_threads // 32}")
        return out


__all__ = ["WmmaGemmConfig"]
