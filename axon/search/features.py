"""Features of a lowered kernel for the cost model, computed from the `TileProgram` (no tracing).

Every instruction of the program is costed once with the ISA cost formulas (`axon.target.costs`)
and multiplied by its loop trip counts, giving analytic per-engine busy times; DMA gets the same
treatment. Everything is log-scaled or a ratio so that a model trained on one shape transfers to
another. The numbers are estimates for ranking, not a simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from axon.ir import DTYPE_BYTES
from axon.target import HardwareSpec
from axon.target.costs import CYCLES, dma_cost
from axon.target.trace import Access
from axon.target.trace import Instr as TraceInstr

ENGINES = ("tensor", "vector", "scalar", "gpsimd")
CATEGORICAL = {
    "fusion": ("fused", "split_matmuls", "unfused"),
    "transpose": ("pe", "dma"),
    "weights": ("stream", "resident"),
    "evac": ("vector", "scalar"),
    "offload": ("none", "half", "all"),
    "interleave": (False, True),
    "skew": (False, True),
}
NUMERIC = ("tile_m", "m_block", "tile_n", "tile_k", "bufs", "psum_bufs", "fold", "split")
OPCODES = (
    "nc_matmul",
    "nc_transpose",
    "activation",
    "tensor_scalar",
    "tensor_tensor",
    "tensor_reduce",
    "tensor_copy",
    "dma_copy",
    "dma_transpose",
)


def _lg(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


def _access(ref: Any, tensors: Mapping[str, Any]) -> Access:
    t = tensors[ref.tensor]
    shape = ref.shape or (1,)
    nbytes = DTYPE_BYTES[t.dtype]
    for s in shape:
        nbytes *= s
    partitions = shape[0] if t.buffer != "hbm" else 1
    per_partition = nbytes // max(partitions, 1)
    return Access(0, t.buffer, 0, partitions, 0, per_partition, nbytes, DTYPE_BYTES[t.dtype])


def _as_trace_instr(ins: Any, tensors: Mapping[str, Any]) -> TraceInstr:
    reads = tuple(_access(r, tensors) for r in ins.reads)
    main = ins.arg("data") or ins.arg("src") or ins.arg("moving") or ins.dst
    attrs = []
    if ins.opcode == "nc_matmul":
        stationary, moving = ins.arg("stationary"), ins.arg("moving")
        attrs = [("moving_free", moving.shape[-1]), ("stationary_free", stationary.shape[-1])]
    for key in ("op", "op0", "op1"):
        value = ins.arg(key)
        if isinstance(value, str):
            attrs.append((key, value.split(".")[-1]))
    return TraceInstr(
        0,
        ins.opcode,
        ins.engine,
        ins.partitions,
        ins.free_size,
        tensors[main.tensor].dtype,
        reads,
        (_access(ins.dst, tensors),),
        0,
        attrs=tuple(attrs),
    )


def _lg_ratio(x: float) -> float:
    return math.log2(max(x, 1e-6))


def program_features(
    program: Any,
    hw: HardwareSpec,
    matmul_flops: float = 0.0,
    min_bytes: float = 0.0,
    roofline_ns: float = 0.0,
    costs: dict[int, tuple[Any, tuple[Any, ...], tuple[str, float, float, float]]] | None = None,
) -> dict[str, float]:
    """Shape-generic features of `program` (an `axon.lower.TileProgram`) on `hw`.

    With the task's `roofline_ns`, the engine and DMA estimates are also given as log ratios to it
    (`*_over_roof`): a kernel at twice its task's bound looks the same at every shape, which is what
    lets a model trained on some shapes rank the points of another.

    `costs` (the caller's, for one `hw`) keeps each instruction's cost across programs: programs
    lowered from remembered passes share instruction objects (`axon.lower.knobmemo`), and an
    instruction's cost depends only on it and the dtype and buffer of the tensors it names, which
    are checked before a kept cost is used.
    """
    tensors = program.tensors()
    busy = {e: 0.0 for e in ENGINES}
    counts = {e: 0 for e in ENGINES + ("dma",)}
    opcodes: dict[str, int] = {}
    dma = {"ns": 0.0, "bytes": 0.0, "transfers": 0, "fixed_ns": 0.0}
    trips = {"loops": 0, "iterations": 0}
    # NC-v2 shared ports: VectorE/GpSimd reading SBUF exclude each other, as do VectorE/ScalarE touching PSUM
    # (ports["psum"] counts VectorE/ScalarE PSUM time on every generation: it is also the evacuation
    # time a single PSUM buffer serializes with TensorE)
    ports = {"sbuf": 0.0, "psum": 0.0}
    cache: dict[int, tuple[str, float, float, float]] = {}

    def cost(ins: Any) -> tuple[str, float, float, float]:
        key = id(ins)
        got = cache.get(key)
        if got is not None:
            return got
        named: tuple[Any, ...] = ()
        if costs is not None:
            named = tuple((tensors[r.tensor].dtype, tensors[r.tensor].buffer) for r in (*ins.reads, ins.dst))
            kept = costs.get(key)
            if kept is not None and kept[0] is ins and kept[1] == named:
                cache[key] = kept[2]
                return kept[2]
        t = _as_trace_instr(ins, tensors)
        if ins.engine == "dma":
            c = dma_cost(t, hw)
            got = ("dma", c.engine_ns * c.engines, float(c.nbytes), c.fixed_ns)
        else:
            fn = CYCLES.get(ins.opcode)
            cycles = fn(t, hw) if fn else float(max(hw.costs.min_ii_cycles, t.free_size))
            got = (ins.engine, cycles / hw.engines[ins.engine].clock_ghz, 0.0, 0.0)
        cache[key] = got
        if costs is not None:
            costs[key] = (ins, named, got)  # the instruction kept, so that its id stays its own
        return got

    def walk(stmts: tuple, mult: int) -> None:
        for s in stmts:
            body = getattr(s, "body", None)
            if body is not None and hasattr(s, "extent"):
                trips["loops"] += 1
                trips["iterations"] += mult * s.extent
                walk(body, mult * s.extent)
            elif hasattr(s, "opcode"):
                engine, ns, nbytes, fixed = cost(s)
                opcodes[s.opcode] = opcodes.get(s.opcode, 0) + mult
                counts[engine] = counts.get(engine, 0) + mult
                if engine == "dma":
                    dma["ns"] += mult * ns
                    dma["bytes"] += mult * nbytes
                    dma["transfers"] += mult
                    dma["fixed_ns"] += mult * fixed
                else:
                    busy[engine] += mult * ns
                    if (
                        hw.ports.vector_gpsimd_share_sbuf
                        and engine in ("vector", "gpsimd")
                        and any(tensors[r.tensor].buffer == "sbuf" for r in s.reads)
                    ):
                        ports["sbuf"] += mult * ns
                    if engine in ("vector", "scalar") and any(
                        tensors[r.tensor].buffer == "psum" for r in s.reads + (s.dst,)
                    ):
                        ports["psum"] += mult * ns

    walk(program.body, 1)
    # engine-time spread over the DMA engines, capped below by the core's HBM bandwidth
    dma_time = max(dma["ns"] / hw.dma.engines, dma["bytes"] / hw.hbm_bytes_per_ns)
    bound = max(max(busy.values()), dma_time, 1.0)
    stats = program.stats()
    f: dict[str, float] = {}
    for e in ENGINES:
        f[f"busy_{e}_log"] = _lg(busy[e])
        f[f"busy_{e}_share"] = busy[e] / bound
        f[f"count_{e}_log"] = _lg(counts[e])
    f["dma_time_log"] = _lg(dma_time)
    f["dma_share"] = dma_time / bound
    f["dma_fixed_log"] = _lg(dma["fixed_ns"] / (hw.dma.engines * hw.dma.queues_per_engine))
    f["dma_bytes_log"] = _lg(dma["bytes"])
    f["dma_transfers_log"] = _lg(dma["transfers"])
    f["dma_bytes_per_transfer_log"] = _lg(dma["bytes"] / max(dma["transfers"], 1))
    f["bound_log"] = _lg(bound)
    evacuation = ports["psum"]
    shared_psum = evacuation if hw.ports.vector_scalar_share_psum else 0.0
    port_bound = max(bound, ports["sbuf"], shared_psum)
    f["port_bound_log"] = _lg(port_bound)
    f["port_psum_share"] = shared_psum / bound
    f["port_sbuf_share"] = ports["sbuf"] / bound
    # the bound assumes loads overlap compute; with one buffer per loaded tile the next load waits
    # for this tile's last reader, so DMA and the busiest engine largely add up instead; with one
    # PSUM buffer TensorE waits for each accumulator's evacuation, so those two add up
    point = dict(program.point)
    overlap_bound = dma_time + max(busy.values()) if int(point.get("bufs", 2) or 2) < 2 else bound
    if int(point.get("psum_bufs", 2) or 2) < 2:
        overlap_bound = max(overlap_bound, busy["tensor"] + evacuation)
    f["overlap_bound_log"] = _lg(max(overlap_bound, 1.0))
    f["sum_busy_over_bound"] = (sum(busy.values()) + dma_time) / bound
    f["sbuf_fraction"] = stats.sbuf_bytes_per_partition / hw.memory.sbuf_bytes_per_partition
    f["psum_fraction"] = stats.psum_bytes_per_partition / hw.memory.psum_bytes_per_partition
    f["loops"] = float(trips["loops"])
    f["iterations_log"] = _lg(trips["iterations"])
    f["intensity_log"] = _lg(matmul_flops / max(dma["bytes"], 1.0))
    f["traffic_over_min"] = dma["bytes"] / max(min_bytes, 1.0)
    f["scratch_tensors"] = float(len(program.scratch))
    if roofline_ns > 0:
        f["bound_over_roof"] = _lg_ratio(bound / roofline_ns)
        f["overlap_bound_over_roof"] = _lg_ratio(overlap_bound / roofline_ns)
        f["dma_over_roof"] = _lg_ratio(dma_time / roofline_ns)
        f["dma_fixed_over_roof"] = _lg_ratio(
            dma["fixed_ns"] / (hw.dma.engines * hw.dma.queues_per_engine) / roofline_ns
        )
        f["sum_busy_over_roof"] = _lg_ratio((sum(busy.values()) + dma_time) / roofline_ns)
        for e in ENGINES:
            f[f"busy_{e}_over_roof"] = _lg_ratio(busy[e] / roofline_ns)
    for op in OPCODES:
        f[f"op_{op}_log"] = _lg(opcodes.get(op, 0))
    point = dict(program.point)
    for knob in NUMERIC:
        f[f"knob_{knob}_log"] = _lg(float(point.get(knob, 0) or 0))
    for knob, choices in CATEGORICAL.items():
        for c in choices:
            f[f"knob_{knob}_{c}"] = float(point.get(knob) == c)
    f["knob_isel_sum"] = float(sum(v for k, v in point.items() if k.startswith("isel.") and isinstance(v, int)))
    return f
