"""Code generation: `llvm/` (LLVM IR, optimisation, object code, the parallel runtime, loading)
and `cuda/` (CUDA C, nvcc/NVRTC, loading and launching on a GPU)."""
