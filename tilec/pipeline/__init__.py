"""The compilation pipeline: a program's stages from tensor IR to a loaded kernel, per backend.

    tensor -> templates -> loop IR -> (passes) -> code -> loaded kernel

`stages` defines each stage, `backends` the list each target runs (and what the disk cache
keeps), `compile` runs them, `cache_key` says what makes two kernels the same, `explain`
prints any stage.
"""

from tilec.pipeline.backends import BACKENDS, STAGES, Backend, backend_for, resolve_target
from tilec.pipeline.cache_key import KERNEL_CODE, cache_key, compiler_fingerprint
from tilec.pipeline.compile import (Kernel, Stats, build_kernel, compilation, disk_key, kernel_key, load_from,
                                    lower_program, run_stages, stats)
from tilec.pipeline.explain import explain
from tilec.pipeline.stages import Compilation, Signature, Stage

__all__ = ["BACKENDS", "KERNEL_CODE", "STAGES", "Backend", "Compilation", "Kernel", "Signature", "Stage", "Stats",
           "backend_for", "build_kernel", "cache_key", "compilation", "compiler_fingerprint", "disk_key", "explain",
           "kernel_key", "load_from", "lower_program", "resolve_target", "run_stages", "stats"]
