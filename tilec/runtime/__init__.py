"""Runtime: compiled Functions (`function`), the process-wide kernel cache (`kernels`), output
memory (`memory`), and torch CUDA tensors as arguments (`torch_cuda`)."""
