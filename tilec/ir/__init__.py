"""The intermediate representations: tensor IR (the program), loop IR (kernels), and what binds,
lowers, rewrites, checks and prints them."""

from tilec.ir import loop, printer

loop.FORMATTER[:] = [printer.format_func]  # str(PrimFunc) prints readable pseudo-code

__all__ = ["loop", "printer"]
