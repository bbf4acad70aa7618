"""The test kernels of tests/cuda_kernels.py launched on a real GPU and compared with numpy.

Marked `gpu`: each test skips, saying why, where no GPU, driver or CUDA binding is present.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda_kernels import Case, all_cases, tensorcore_cases
from tilec.codegen.cuda.source import render_cuda
from tilec.errors import BindError

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def arch() -> str:
    from tilec.codegen.cuda.loader import CudaUnavailable, device_arch

    try:
        return device_arch()
    except CudaUnavailable as e:
        pytest.skip(f"no GPU: {e}")


def _check(case: Case, got: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> None:
    for name, want in case.expected(inputs).items():
        tol = dict(rtol=1e-2, atol=1e-2) if want.dtype == np.float16 else dict(rtol=1e-4, atol=1e-4)
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got[name], want, equal_nan=True, err_msg=name, **tol)
        else:
            np.testing.assert_array_equal(got[name], want, err_msg=name)


@pytest.mark.parametrize("case", all_cases() + tensorcore_cases(), ids=lambda case: case.func.name)
def test_kernel_on_numpy_arrays_matches_numpy(case: Case, arch: str) -> None:
    from tilec.codegen.cuda.loader import load_cuda

    inputs = case.make_inputs(np.random.default_rng(0))
    arrays = {k: v.copy() for k, v in inputs.items()}
    load_cuda(render_cuda(case.func), arch).run(arrays)
    _check(case, arrays, inputs)


@pytest.mark.parametrize("case", all_cases(), ids=lambda case: case.func.name)
def test_kernel_on_torch_tensors_matches_numpy(case: Case, arch: str) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    from tilec.codegen.cuda.loader import load_cuda

    inputs = case.make_inputs(np.random.default_rng(1))
    tensors = {k: torch.from_numpy(v.copy()).cuda() for k, v in inputs.items()}
    load_cuda(render_cuda(case.func), arch).run([tensors[p.name] for p in case.func.params])
    torch.cuda.current_stream().synchronize()
    _check(case, {k: t.cpu().numpy() for k, t in tensors.items()}, inputs)


def test_bad_arguments_are_bind_errors(arch: str) -> None:
    from tilec.codegen.cuda.loader import load_cuda

    case = all_cases()[0]
    module = load_cuda(render_cuda(case.func), arch)
    inputs = case.make_inputs(np.random.default_rng(2))
    with pytest.raises(BindError, match="parameter A is float32"):
        module.run({**inputs, "A": inputs["A"].astype(np.float64)})
    with pytest.raises(BindError, match="3 arrays expected"):
        module.run([inputs["A"]])
