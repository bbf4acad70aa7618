"""The ops that `tilec bench` times: each op's Tile source, inputs, baseline and shapes.

`sources` holds every Tile source of the benchmark, `inputs` and `baselines` what each op runs
on and is timed against, `op` the Op record (and the --shape text), `table` the ops by name,
`backward` the gradient cases, `cases` what the harness runs. The names the harness, the CLI
and the tests use are importable from here.
"""

from tilec.bench.ops.backward import BACKWARD_OPS, backward_op
from tilec.bench.ops.cases import DTYPES, Case, Prepared, select_cases
from tilec.bench.ops.inputs import conv2d_output_size
from tilec.bench.ops.op import BenchError, Inputs, Op, Shape, format_shape, parse_shape
from tilec.bench.ops.sources import attention_source, conv2d_source, gemm_bias_relu_source, gemm_source
from tilec.bench.ops.table import OP_NAMES, OPS, get_op

__all__ = ["BACKWARD_OPS", "DTYPES", "OPS", "OP_NAMES", "BenchError", "Case", "Inputs", "Op", "Prepared", "Shape",
           "attention_source", "backward_op", "conv2d_output_size", "conv2d_source", "format_shape",
           "gemm_bias_relu_source", "gemm_source", "get_op", "parse_shape", "select_cases"]
