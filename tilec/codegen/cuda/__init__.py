"""The CUDA backend's code: CUDA C from GPU loop IR (`source`, `expr`, `wmma`, `analysis`,
`prelude`), compiled by `nvcc` (or NVRTC), loaded and launched (`loader`, `launchers`)."""
