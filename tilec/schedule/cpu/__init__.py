"""The CPU templates (target llvm): GEMM (`implicit_gemm/`: packed, direct, in-place), `winograd/`,
`attention`, `attention_backward/`, `permute`, `column_reduce`, `stencil`, `rowwise`, `parallel_outer`, and the
layout copies folded into GEMM packing (`copy_fold`)."""
