"""placeholder"""
from dataclasses import dataclass
@dataclass(frozen=True)
class GpuAttentionKnobs:
    bq: int = 64
def applicable(plan):
    return False
def build(plan, bp, knobs=None, where=""):
    raise NotImplementedError
