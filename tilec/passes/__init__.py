"""IR -> IR passes after scheduling: `lower_wmma` (tensor-core statements as plain loops) and
`emulate_gpu` (a GPU PrimFunc as a CPU one, for target cuda-sim)."""
