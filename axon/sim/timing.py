"""`Timing`: the result of simulating a kernel (latency, engine busy time, DMA traffic, critical path).

A value computed from a finished schedule; the schedule itself is `simulate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from axon.sim.timeline import Timeline
from axon.target.hardware import HardwareSpec
from axon.target.trace import Trace

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")


@dataclass(frozen=True)
class Timing:
    """What a user asks of a profile.

    `latency_ns` = `span_ns` (first issue to last completion) + `launch_ns`. `busy_ns[e]` is the sum
    of engine e's instruction costs ("dma": engine-ns over all DMA engines divided by their count),
    `utilization[e]` = busy / latency. `critical_path` lists instruction indices, first to last,
    along the chain of constraints (dependency, engine queue, port, barrier) that set the latency;
    `critical_ns` is how much of the span each lane adds along that path (they sum to the span).
    """

    kernel: str
    hw: str
    latency_ns: float
    span_ns: float
    launch_ns: float
    busy_ns: Mapping[str, float]
    utilization: Mapping[str, float]
    instructions: Mapping[str, int]
    dma_bytes: int  # what the kernel's DMA instructions move (the trace's own, extrapolates linearly)
    hbm_bytes: int  # HBM traffic after the compiler's residency: hbm_read_bytes + hbm_write_bytes
    dma_gbps: float  # achieved: dma_bytes / latency
    matmul_flops: float
    tensor_flop_utilization: float  # matmul FLOPs / (peak bf16 FLOP/s x latency)
    critical_path: tuple[int, ...]
    critical_ns: Mapping[str, float]
    timeline: Timeline = field(repr=False, compare=False)
    hbm_read_bytes: int = 0  # HBM traffic after the compiler's residency (see `residency.py`)
    hbm_write_bytes: int = 0

    @classmethod
    def build(
        cls,
        trace: Trace,
        hw: HardwareSpec,
        timeline: Timeline,
        busy: dict[str, float],
        counts: dict[str, int],
        dma_bytes: int,
        hbm_rw: tuple[int, int],
        flops: float,
        path: tuple[int, ...],
    ) -> Timing:
        span = float(timeline.end_ns.max()) if len(timeline) else 0.0
        latency = span + hw.costs.launch_overhead_ns
        busy = dict(busy)
        busy["dma"] = busy["dma"] / hw.dma.engines
        util = {e: (b / latency if latency else 0.0) for e, b in busy.items()}
        crit: dict[str, float] = {}
        before = 0.0
        for k in path:  # what each instruction on the path adds beyond the one it waited for
            lane = timeline.lane[k]
            lane = "dma" if lane.startswith("dma") else lane
            end = float(timeline.end_ns[k])
            crit[lane] = crit.get(lane, 0.0) + max(end - before, 0.0)
            before = max(before, end)
        return cls(
            trace.kernel,
            hw.name,
            latency,
            span,
            hw.costs.launch_overhead_ns,
            busy,
            util,
            dict(counts),
            dma_bytes,
            hbm_rw[0] + hbm_rw[1],
            dma_bytes / latency if latency else 0.0,
            flops,
            flops / (hw.peak_matmul_flops_per_s * latency * 1e-9) if latency else 0.0,
            path,
            crit,
            timeline,
            hbm_rw[0],
            hbm_rw[1],
        )

    def summary(self) -> str:
        """A few lines for a terminal."""
        lines = [
            f"{self.kernel} on {self.hw}: latency {_fmt(self.latency_ns)} "
            f"(span {_fmt(self.span_ns)} + launch {_fmt(self.launch_ns)})"
        ]
        for e in (*COMPUTE_ENGINES, "dma"):
            if self.instructions.get(e):
                lines.append(
                    f"  {e:<7} {self.instructions[e]:>8} instr  busy {_fmt(self.busy_ns[e]):>10}  "
                    f"util {100 * self.utilization[e]:5.1f}%"
                )
        lines.append(
            f"  dma bytes {self.dma_bytes:,}  achieved {self.dma_gbps:.1f} GB/s  "
            f"TensorE FLOP utilization {100 * self.tensor_flop_utilization:.1f}%"
        )
        parts = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(self.critical_ns.items(), key=lambda kv: -kv[1]))
        lines.append(f"  critical path: {len(self.critical_path)} instr ({parts})")
        return "\n".join(lines)


def _fmt(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.0f} ns"


def critical_path(ends: list[float], pred: list[int]) -> tuple[int, ...]:
    """Follow binding predecessors back from the instruction that ends last."""
    if not ends:
        return ()
    k = max(range(len(ends)), key=ends.__getitem__)
    out = []
    seen = set()
    while k >= 0 and k not in seen:
        seen.add(k)
        out.append(k)
        k = pred[k]
    return tuple(reversed(out))
