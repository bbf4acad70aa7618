"""The LLVM backend's code: `module` (the kernel's module) over `body` (statements and loops),
`scalar` and `vector` (expressions, vector loops), `transpose` (permutations in registers),
`parallel` and `runtime` (the worker pool parallel loops run on), `loop_metadata`, `types`;
`jit` optimises, emits object code and loads it (`binding`: llvmlite, initialised once);
`probes`: the small loops tilec.runtime.peaks times to measure the machine's peaks."""
