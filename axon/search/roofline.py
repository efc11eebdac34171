"""The roofline bound of a workload on a NeuronCore: no kernel can beat it.

bound = max(TensorE time for the matmul FLOPs at peak for the dtype, HBM time for the minimum bytes
at peak bandwidth). Elementwise work is not counted (it overlaps), so the bound is optimistic for
kernels dominated by Vector/Scalar work.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon.ir import Graph, matmul_flops, min_bytes
from axon.target import HardwareSpec


@dataclass(frozen=True)
class Roofline:
    tensor_ns: float
    hbm_ns: float

    @property
    def bound_ns(self) -> float:
        return max(self.tensor_ns, self.hbm_ns)

    @property
    def limiter(self) -> str:
        return "tensor" if self.tensor_ns >= self.hbm_ns else "hbm"


def roofline(graph: Graph, hw: HardwareSpec) -> Roofline:
    """>>> from axon.workloads import get; from axon.target import load_hw
    >>> r = roofline(get("matmul").graph(dtype="bfloat16"), load_hw("trn1"))
    >>> r.limiter, round(r.tensor_ns / 1e6, 2)
    ('tensor', 5.62)
    """
    dtype = graph.inputs[0].type.dtype
    peak = hw.peak_matmul_flops_per_s / (hw.tensor_engine.fp32_slowdown if dtype == "float32" else 1.0)
    tensor_ns = matmul_flops(graph) / peak * 1e9
    hbm_ns = min_bytes(graph) / hw.hbm_bytes_per_ns
    return Roofline(tensor_ns, hbm_ns)
