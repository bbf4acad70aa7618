"""The GPU templates (targets cuda and cuda-sim): `gemm` (CUDA cores), `tensorcore` (WMMA),
`attention`; `tiled_matmul` for small plain products; `launch` binds every nest to blocks and
threads."""
