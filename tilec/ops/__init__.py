"""The operator library: PyTorch custom ops (`torch.ops.tilec.*`) defined in Tile, with fake kernels
and autograd through tilec.grad. Importing `torch_ops` registers them; `sources` holds the Tile."""
