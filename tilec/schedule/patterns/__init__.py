"""Target-neutral matchers: what a statement (or a chain of them) is, as a plan, with no dtype or
target policy of its own (the dtypes a template takes are its argument): `gemm`, `attention`,
`attention_backward`, `epilogue`, `layout_copy`, `dataflow`."""
