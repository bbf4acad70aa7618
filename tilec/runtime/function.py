"""`tilec.compile` returns a Function: parse once, compile per argument signature.

Each Function keeps the kernels of the signatures it was called with; kernels are also cached for
the whole process (tilec.runtime.kernels, bounded) and their object code on disk, under the
pipeline's cache key (tilec.pipeline.cache_key).
"""

from __future__ import annotations

import copy
import ctypes
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tilec import pipeline
from tilec.pipeline import Kernel, Signature, resolve_target
from tilec.runtime import memory, torch_cuda
from tilec.config import logs, options
from tilec.errors import BindError, TilecError, TilecWarning, located
from tilec.frontend import parse
from tilec.ir.dtypes import check_supported
from tilec.ir.size_values import size_inputs
from tilec.records import recorded_schedule
from tilec.runtime.kernels import kernels
from tilec.schedule import params as lowering_params
from tilec.target import Target

if TYPE_CHECKING:
    from tilec.schedule.template_schedule import TemplateSchedule
    from tilec.schedule.primitives.records import Schedule

class Function:
    """A compiled Tile program. Call it with numpy arrays (positionally or by name)."""

    def __init__(self, source: str, target: "str | Target" = "llvm", **sizes: int) -> None:
        for name, value in sizes.items():
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise BindError(f"size '{name}' must be an integer, got {value!r}")
        self.source = source
        self.sizes = {k: int(v) for k, v in sizes.items()}
        self.program = parse(source, self.sizes)
        self.target = resolve_target(target)
        self.inputs: tuple[str, ...] = self.program.input_names
        self.outputs: tuple[str, ...] = self.program.outputs
        # scalar inputs read as sizes (`function (I[N], S[]) -> ... I[x * S]`): each call binds the size
        # from the argument's value, so the kernel is specialised (and cached) per value
        self.size_inputs: tuple[str, ...] = size_inputs(self.program)
        self.schedule: "Schedule | TemplateSchedule | None" = None  # None: the heuristic's templates
        self._by_signature: dict[tuple, Kernel] = {}
        # per (signature, options.records_key()): the records' schedule, and where each statement's came from
        self._recorded: dict[tuple[Signature, Any], "TemplateSchedule | None"] = {}
        self._sources: dict[tuple[Signature, Any], dict[int, str]] = {}  # statement -> the record that schedules it

    def with_schedule(self, schedule: "Schedule | TemplateSchedule") -> "Function":
        """A Function computing the same program with `schedule` applied to its loop IR.

        The parsed program is shared; the schedule is copied, so later changes to `schedule`
        do not affect the returned Function. Illegal primitives raise ScheduleError at the
        first call (or `explain`), when the loop nest they apply to is known.
        """
        from tilec.schedule.primitives.records import Schedule
        from tilec.schedule.template_schedule import TemplateSchedule

        if isinstance(schedule, TemplateSchedule):
            copied: Any = schedule  # frozen: nothing to copy
        elif isinstance(schedule, Schedule):
            copied = Schedule(schedule.primitives)
        else:
            raise TypeError(f"with_schedule takes a tilec.Schedule or tilec.TemplateSchedule, got "
                            f"{type(schedule).__name__}")
        other = copy.copy(self)
        other.schedule = copied
        other._by_signature = {}
        return other

    def __repr__(self) -> str:
        return f"<tilec.Function ({', '.join(self.inputs)}) -> ({', '.join(self.outputs)}) on {self.target.name}>"

    # ------------------------------------------------------------ calling

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch_cuda.any_torch_cuda(args) or torch_cuda.any_torch_cuda(kwargs.values()):
            return self._call_on_device(args, kwargs)
        arrays = self._arguments(args, kwargs)
        # the lowering parameters and the tuning records in force are part of what a kernel is
        sig_key = (lowering_params.current(), options.records_key(), tuple((a.shape, a.dtype.char) for a in arrays),
                   tuple(self._size_values(arrays)))
        kernel = self._by_signature.get(sig_key)
        if kernel is None:
            kernel = self.kernel(self._signature(arrays))
            self._by_signature[sig_key] = kernel
        return _run(kernel, arrays, len(self.outputs))

    def kernel_for(self, shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...],
                   size_values: Mapping[str, int] | None = None) -> Kernel:
        """The kernel for inputs of these shapes and dtypes (numpy names), in input order.

        For callers that hold buffers other than numpy arrays (torch tensors): they pass the
        buffers' addresses to a `pointer_runner`. The lookup shares `__call__`'s per-signature cache.
        A program that reads scalar inputs as sizes (`self.size_inputs`) is specialised per value:
        `size_values` gives each one's value (a BindError names any that is missing)."""
        if len(shapes) != len(self.inputs) or len(dtypes) != len(self.inputs):
            raise BindError(f"kernel_for needs one shape and one dtype per input ({', '.join(self.inputs)}); "
                            f"got {len(shapes)} shapes and {len(dtypes)} dtypes")
        given = dict(size_values or {})
        missing = [n for n in self.size_inputs if n not in given]
        if missing or set(given) - set(self.size_inputs):
            raise BindError(f"kernel_for: the program reads the input(s) {', '.join(self.size_inputs) or '(none)'} "
                            f"as sizes; pass exactly their values as size_values (e.g. "
                            f"size_values={{'{(missing or list(given))[0]}': 2}}), got {sorted(given) or 'none'}")
        for name, value in given.items():
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise BindError(f"size value of '{name}' must be an integer, got {value!r}")
        np_dtypes = [np.dtype(d) for d in dtypes]
        arguments = tuple((tuple(int(d) for d in shape), dt.char) for shape, dt in zip(shapes, np_dtypes))
        values = [(n, int(given[n])) for n in self.size_inputs]
        sig_key = (lowering_params.current(), options.records_key(), arguments, tuple(values))
        kernel = self._by_signature.get(sig_key)
        if kernel is None:
            sig = Signature(
                shapes=tuple((n, shape) for n, (shape, _) in zip(self.inputs, arguments)),
                dtypes=tuple((n, check_supported(n, dt)) for n, dt in zip(self.inputs, np_dtypes)),
                sizes=self._sizes_with(values),
            )
            kernel = self._by_signature[sig_key] = self.kernel(sig)
        return kernel

    def _call_on_device(self, args: tuple, kwargs: dict) -> Any:
        """torch CUDA tensors on target cuda: device pointers, torch's current stream (tilec.runtime.torch_cuda)."""
        named = self._values(args, kwargs)
        device = torch_cuda.check_devices(self.target.name, named)
        tensors = [named[name] for name in self.inputs]
        kernel = self.kernel_for(tuple(tuple(t.shape) for t in tensors),
                                 tuple(torch_cuda.dtype_name(n, named[n]) for n in self.inputs),
                                 {n: torch_cuda.size_value(n, named[n]) for n in self.size_inputs})
        return torch_cuda.run(kernel, tensors, len(self.outputs), device)

    def _arguments(self, args: tuple, kwargs: dict) -> list[np.ndarray]:
        values = self._values(args, kwargs)
        return [_as_array(name, values[name]) for name in self.inputs]

    def _values(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """The argument of each input, by name, in input order (BindError for missing/extra ones)."""
        n = len(self.inputs)
        if len(args) > n:
            raise BindError(f"too many arguments: the program takes {n} input(s) ({', '.join(self.inputs)}), "
                            f"got {len(args)} positional")
        values: dict[str, Any] = dict(zip(self.inputs, args))
        for name, value in kwargs.items():
            if name not in self.inputs:
                raise BindError(f"unknown argument '{name}'; the inputs are {', '.join(self.inputs)}")
            if name in values:
                raise BindError(f"argument '{name}' given twice (positionally and by keyword)")
            values[name] = value
        missing = [name for name in self.inputs if name not in values]
        if missing:
            raise BindError(f"missing argument(s) {', '.join(missing)}; the inputs are {', '.join(self.inputs)}")
        return {name: values[name] for name in self.inputs}

    def _size_values(self, arrays: list[np.ndarray]) -> list[tuple[str, int]]:
        """(name, value) of each scalar integer input read as a size."""
        out = []
        for name in self.size_inputs:
            a = arrays[self.inputs.index(name)]
            if a.shape != () or a.dtype.kind not in "iu":
                with located(self.program.params[self.inputs.index(name)].pos, self.source):
                    raise BindError(f"argument '{name}' is used as a size, so it must be an integer scalar; got "
                                    f"{a.dtype.name} of shape {a.shape}")
            out.append((name, int(a)))
        return out

    def _sizes_with(self, values: list[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
        """The keyword sizes and the size inputs' values together (BindError where they disagree)."""
        sizes = dict(self.sizes)
        for name, value in values:
            if sizes.get(name, value) != value:
                raise BindError(f"argument '{name}' is {value} but the keyword {name}={sizes[name]} was given")
            sizes[name] = value
        return tuple(sorted(sizes.items()))

    def _signature(self, arrays: list[np.ndarray]) -> Signature:
        return Signature(
            shapes=tuple((n, tuple(a.shape)) for n, a in zip(self.inputs, arrays)),
            dtypes=tuple((n, check_supported(n, a.dtype)) for n, a in zip(self.inputs, arrays)),
            sizes=self._sizes_with(self._size_values(arrays)),
        )

    def kernel(self, sig: Signature) -> Kernel:
        """The compiled kernel for one signature (from the process-wide cache when possible).

        Without an explicit schedule, the best tuning records for this signature apply
        (tilec.records); if their schedule does not build, a TilecWarning says so and
        the default schedule compiles instead.
        """
        recorded = self._recorded_schedule(sig)
        if recorded is not None:
            try:
                return self._kernel(sig, recorded)
            except TilecError as err:
                warnings.warn(f"the schedule of the best tuning records does not build ({err}); "
                              f"compiling with the default schedule", TilecWarning, stacklevel=2)
                self._recorded[sig, options.records_key()] = None
        return self._kernel(sig, self.schedule)

    def _recorded_schedule(self, sig: Signature) -> "TemplateSchedule | None":
        """The best tuning records' schedule when no schedule was given, looked up once per signature."""
        if self.schedule is not None:
            return None
        key = (sig, options.records_key())
        if key not in self._recorded:
            sources: dict[int, str] = {}
            self._recorded[key] = recorded_schedule(self.program, sig, self.target, sources)
            self._sources[key] = sources
            if logs("schedule"):
                first = str(self.program).splitlines()[0]
                shapes = ", ".join(f"{n}={'x'.join(map(str, d))}" for n, d in sig.shapes)
                print(f"tilec schedule: {first} at {shapes}:\n" + self._origins(
                    pipeline.explain(self.program, sig, self.target, "templates", self._recorded[key]), sig),
                    file=sys.stderr)
        return self._recorded[key]

    def _origins(self, templates: str, sig: Signature) -> str:
        """The templates stage's lines, each with where its statement's schedule came from: the
        schedule given to this Function, a tuning record (file, row, trial, time) or the heuristic."""
        sources = self._sources.get((sig, options.records_key()), {})

        def origin(match: re.Match[str]) -> str:
            where = "the given schedule" if self.schedule is not None else sources.get(int(match.group(1)), "heuristic")
            return f"{match.group(0)}    <- {where}"
        return re.sub(r"(?m)^(\d+): .*$", origin, templates)

    def _kernel(self, sig: Signature, schedule: "Schedule | TemplateSchedule | None") -> Kernel:
        c = pipeline.compilation(self.program, sig, self.target, schedule)
        key = pipeline.kernel_key(c, pipeline.backend_for(self.target))
        return kernels.get(key, lambda: pipeline.build_kernel(c, key))

    # ------------------------------------------------------------ inspection

    def explain(self, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str] | None = None,
                stage: str | None = None) -> str:
        """Print every stage (or one) for inputs of the given shapes and dtypes (float32 by default)."""
        for what, given in (("shapes", shapes), ("dtypes", dtypes)):
            if given is not None and not isinstance(given, Mapping):
                raise BindError(f"explain's {what} must map input names to {what}, e.g. "
                                f"{{{self.inputs[0]!r}: ...}} (the inputs are {', '.join(self.inputs)}); "
                                f"got a {type(given).__name__}")
        unknown = set(shapes) - set(self.inputs)
        if unknown:
            raise BindError(f"unknown input(s) {', '.join(sorted(unknown))}; the inputs are {', '.join(self.inputs)}")
        missing = [n for n in self.inputs if n not in shapes]
        if missing:
            raise BindError(f"give a shape for every input; missing {', '.join(missing)}")
        dtypes = dtypes or {}
        sig = Signature(
            shapes=tuple((n, tuple(int(d) for d in shapes[n])) for n in self.inputs),
            dtypes=tuple((n, check_supported(n, np.dtype(dtypes.get(n, "float32")))) for n in self.inputs),
            sizes=tuple(sorted(self.sizes.items())),
        )
        text = pipeline.explain(self.program, sig, self.target, stage, self._recorded_schedule(sig) or self.schedule)
        if stage == "templates":
            return self._origins(text, sig)
        if stage is None:  # the templates section only
            head, marker, rest = text.partition(";; ---- templates ----")
            section, next_marker, tail = rest.partition(";; ----")
            return head + marker + self._origins(section, sig) + next_marker + tail if marker else text
        return text


def _as_array(name: str, value: Any) -> np.ndarray:
    """`value` as a C-contiguous native-endian numeric array: without a copy for a C-contiguous numpy
    array or CPU torch tensor (one that requires grad included: the kernel reads its values, and
    the result, a numpy array, is outside autograd; tilec.ops.program gives differentiable ops)."""
    if isinstance(value, np.ndarray) and value.flags.c_contiguous and value.dtype.isnative:
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        value = value.detach().resolve_conj().resolve_neg()
        if str(value.dtype) == "torch.bfloat16" and value.device.type == "cpu":
            # numpy knows no torch bfloat16: the same bits, viewed as ml_dtypes' bfloat16
            import torch
            return value.contiguous().view(torch.int16).numpy().view(np.dtype("bfloat16"))
    try:
        array = np.asarray(value)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)  # (never 0-d here: 0-d arrays are contiguous)
    except (TypeError, ValueError) as err:
        raise BindError(f"argument '{name}' is not array-like: {err}") from None
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
        raise BindError(f"argument '{name}' has dtype {array.dtype}; tilec takes numeric arrays")
    return array


MAX_SCRATCH_SETS = 2  # per kernel: enough for two concurrent callers without unbounded growth


def _run(kernel: Kernel, inputs: list[np.ndarray], n_outputs: int) -> Any:
    """Allocate the outputs, take a scratch set (temporaries, workspaces), call the kernel."""
    params = kernel.params
    first_scratch = len(inputs) + n_outputs
    try:
        outputs = [memory.outputs.empty(b.shape, b.dtype) for b in params[len(inputs):first_scratch]]
        try:
            scratch = kernel.scratch.pop()
        except IndexError:
            scratch = [memory.aligned_empty(b.shape, b.dtype) for b in params[first_scratch:]]
    except (MemoryError, ValueError):
        sizes = ", ".join(f"{b.name} {b.dtype}{list(b.shape)}" for b in params[len(inputs):])
        raise BindError(f"cannot allocate the program's outputs and temporaries ({sizes}): not enough "
                        f"memory; check the output sizes") from None
    kernel.run(inputs + outputs + scratch)
    if len(kernel.scratch) < MAX_SCRATCH_SETS:
        kernel.scratch.append(scratch)
    return outputs[0] if n_outputs == 1 else tuple(outputs)


def _scratch_runner(kernel: Kernel, n_pointers: int) -> Callable[[Sequence[int]], None]:
    """A call of a host `kernel` on its inputs and outputs given by address, its temporaries from a
    pool of scratch sets of this runner's own (one per concurrent caller, as `_run` takes them from
    the kernel's), whose addresses are computed once per set."""
    params = kernel.params
    array_type = ctypes.c_void_p * len(params)
    function = kernel.loaded.function
    pool: list[tuple[list[np.ndarray], list[int]]] = []

    def run(pointers: Sequence[int]) -> None:
        try:
            scratch = pool.pop()
        except IndexError:
            arrays = [memory.aligned_empty(b.shape, b.dtype) for b in params[n_pointers:]]
            scratch = (arrays, [a.ctypes.data for a in arrays])
        function(array_type(*pointers, *scratch[1]))
        if len(pool) < MAX_SCRATCH_SETS:
            pool.append(scratch)

    return run


def pointer_runner(kernel: Kernel, n_pointers: int) -> Callable[[Sequence[int]], None]:
    """A call of `kernel` on buffers given by address, `n_pointers` per call: its inputs, then its
    outputs (`kernel.params` in order, up to its temporaries, which come from the kernel's scratch
    sets). The per-call work is done once: the ctypes array type of the kernel's arity, and no
    scratch handling at all when the kernel has no temporaries (the common case).

    The caller guarantees what `Function.__call__` checks: every buffer is C-contiguous, has the
    shape and dtype of its parameter, and stays alive during the call. Host memory only: a kernel
    of target cuda runs through `Kernel.run` (or torch CUDA tensors through `Function.__call__`)."""
    if kernel.invoke is not None:
        raise TilecError("pointer_runner calls kernels of the host targets (llvm, cuda-sim) on host memory; "
                         "call the Function itself for target cuda")
    if n_pointers != len(kernel.params):
        return _scratch_runner(kernel, n_pointers)
    array_type = ctypes.c_void_p * n_pointers
    function = kernel.loaded.function

    def run(pointers: Sequence[int]) -> None:
        function(array_type(*pointers))

    return run
