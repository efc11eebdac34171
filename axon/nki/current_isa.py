"""The current `nki.isa` interface (Neuron SDK 2.28+): destination passing, `dst` first.

The instructions themselves live in `instructions.py`; this module is the namespace a kernel sees
as `import nki.isa as nisa`.
"""

from axon.nki.instructions import (activation, activation_reduce, affine_select, bn_aggr, bn_stats,  # noqa: F401
                                   dma_copy, dma_transpose, engine, gpsimd_engine, iota, matmul_perf_mode,
                                   memset, nc_matmul, nc_transpose, reciprocal, reduce_cmd,
                                   scalar_engine, scalar_tensor_tensor, tensor_copy, tensor_engine,
                                   tensor_reduce, tensor_scalar, tensor_scalar_reduce, tensor_tensor,
                                   tensor_tensor_scan, unknown_engine, vector_engine)
