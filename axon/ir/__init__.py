"""Tensor-program IR: graphs with symbolic dimensions, the tracing frontend, the NumPy reference."""

from axon.ir.builder import GraphBuilder, broadcast_shapes, infer_type
from axon.ir.dims import Dim, parse_dim, parse_shape, shape_str
from axon.ir.evaluate import DEFINED_RANGE, defined_case, evaluate, max_rel_error, random_inputs, reference_case
from axon.ir.graph import DTYPE_BYTES, DTYPES, KERNEL_DTYPES, Graph, Node, TensorType
from axon.ir.stats import flops, matmul_flops, min_bytes
from axon.ir.trace import trace

__all__ = [
    "DTYPES",
    "KERNEL_DTYPES",
    "DTYPE_BYTES",
    "Dim",
    "Graph",
    "GraphBuilder",
    "Node",
    "TensorType",
    "broadcast_shapes",
    "DEFINED_RANGE",
    "defined_case",
    "evaluate",
    "flops",
    "infer_type",
    "matmul_flops",
    "max_rel_error",
    "min_bytes",
    "parse_dim",
    "parse_shape",
    "random_inputs",
    "reference_case",
    "shape_str",
    "trace",
]
