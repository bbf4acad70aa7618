"""Runtime: compiled Functions (`function`), the process-wide kernel cache (`kernels`), output
memory (`memory`), torch CUDA tensors as arguments (`torch_cuda`), the machine's measured peaks
(`peaks`) and `do_bench`, the time of any callable (`timing`)."""
