"""What tuning on a GPU target needs beyond the CPU's tuner: running candidates on the device and
timing them there.

The tuner's parts (search, model, records, the isolated measurement process) and the GPU templates'
spaces (tilec.schedule.gpu) are shared; on target cuda a candidate runs on torch CUDA copies of the
inputs and is timed with CUDA events on torch's stream (its outputs come back as numpy arrays for
the check against the default's); on cuda-sim it runs on the emulator, which tests the plumbing
only (its times say nothing about a GPU).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import numpy as np

from tilec.target import Target

Call = Callable[[list[np.ndarray]], Any]


def on_device(call: Call) -> Call:
    """`call` (a compiled Function's call on a list of inputs) made to run on torch CUDA copies of
    the inputs (made once per input list) and return numpy outputs; `.device_call` is the call to
    time (no copies)."""
    import torch

    on_gpu: dict[int, list[Any]] = {}

    def run(arrays: list[np.ndarray]) -> Any:
        if id(arrays) not in on_gpu:  # the inputs go to the GPU once, not per call
            on_gpu[id(arrays)] = [torch.from_numpy(a).cuda() for a in arrays]
        out = call(on_gpu[id(arrays)])  # type: ignore[arg-type]
        outs = out if isinstance(out, tuple) else (out,)
        host = tuple(o.cpu().numpy() for o in outs)
        return host if isinstance(out, tuple) else host[0]

    run.device_call = lambda arrays: call(on_gpu[id(arrays)])  # type: ignore[attr-defined]
    return run


def time_gpu(target: Target, call: Callable[[], Any], repeats: int, min_repeat_s: float) -> float:
    """Seconds per call: CUDA events on torch's current stream (target cuda), wall clock once on the
    emulator (cuda-sim)."""
    if target.host is not None:  # cuda-sim: the emulator on the host CPU
        t0 = time.perf_counter()
        call()
        return time.perf_counter() - t0
    import torch

    call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end) / 1e3, 1e-7)
    number = max(1, math.ceil(min_repeat_s / once))
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(number):
            call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / number)
    return statistics.median(samples)


__all__ = ["on_device", "time_gpu"]
