"""The whole kernel's figures from two partial runs of its trace (`SimBackend`'s extrapolation).

A run is summarized (`summarize`) by what the extrapolation needs of it: per cut top-level loop its
span, instruction count, DMA bytes and busy time per engine, and the run's latency and instruction
count. The summary is small and picklable, so the shorter run can be traced and simulated by a
forked child (`axon.forked`) while this process does the longer one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

COMPUTE = ("tensor", "vector", "scalar", "gpsimd")  # the engines whose busy time grows per loop


class RunSummary(NamedTuple):
    loops: dict[int, dict[str, float]]  # `per_loop`
    latency_ns: float
    instructions: int


def summarize(trace: Any, timing: Any, cut: dict[int, int]) -> RunSummary:
    return RunSummary(per_loop(trace, timing, cut), float(timing.latency_ns), len(trace.instructions))


def per_loop(trace: Any, timing: Any, cut: dict[int, int]) -> dict[int, dict[str, float]]:
    """Per cut top-level loop: its span on the timeline, instruction count, DMA bytes, busy per engine.

    One pass over the instructions on Python floats (the timeline's float64 values, summed in
    instruction order, as indexing the arrays one instruction at a time did)."""
    tl = timing.timeline
    starts, ends, lanes = tl.start_ns.tolist(), tl.end_ns.tolist(), tl.lane
    # per loop: [first start, last end, instructions, DMA bytes read, busy ns per engine]
    acc: dict[int, list[Any]] = {}
    for i, ins in enumerate(trace.instructions):
        if not ins.loops or ins.loops[0][0] not in cut:
            continue
        s, e = starts[i], ends[i]
        r = acc.get(ins.loops[0][0])
        if r is None:
            r = acc[ins.loops[0][0]] = [s, e, 0, 0, {}]
        elif s < r[0]:
            r[0] = s
        if e > r[1]:
            r[1] = e
        r[2] += 1
        if ins.engine == "dma":
            r[3] += sum(a.nbytes for a in ins.reads)
        lane = lanes[i]
        eng = "dma" if lane.startswith("dma") else lane
        r[4][eng] = r[4].get(eng, 0.0) + (e - s)
    out: dict[int, dict[str, float]] = {}
    for lid in cut:
        r = acc.get(lid)
        if r is None:
            out[lid] = {"span": 0.0, "n": 0.0, "dma_bytes": 0.0}
            continue
        row: dict[str, float] = {"span": r[1] - r[0], "n": float(r[2]), "dma_bytes": float(r[3])}
        row.update((f"busy.{eng}", ns) for eng, ns in r[4].items())
        out[lid] = row
    return out


def extrapolated(a: RunSummary, tb: Any, sb: Any, counts: dict[int, tuple[int, int, int]]) -> dict[str, Any]:
    """The fields of the whole kernel's measurement from run a (summarized) and run b (its trace
    `tb` and timing `sb`). `counts[loop] = (iterations in run a, in run b, trip count)`. Latency: the
    growth from run a to run b, repeated until every loop is whole (each loop's share of the growth
    follows the growth of its own span when trip counts differ), and at least run b's latency plus
    any compute engine's added busy time. Counts, bytes and compute engines' busy times: per loop,
    linear in its iterations; the DMA's busy time in proportion to its bytes."""
    cut = {lid: c[2] for lid, c in counts.items()}
    pa, pb = a.loops, per_loop(tb, sb, cut)
    grow = max(0.0, float(sb.latency_ns) - a.latency_ns)
    spans = {lid: max(0.0, pb[lid]["span"] - pa[lid]["span"]) for lid in cut}
    total = sum(spans.values())
    latency, dma, n = float(sb.latency_ns), float(sb.dma_bytes), float(len(tb.instructions))
    busy = {k: float(v) for k, v in sb.busy_ns.items()}
    for lid, (ca, cb, trips) in counts.items():
        more = (trips - cb) / (cb - ca)
        da, db = pa[lid], pb[lid]
        latency += more * grow * (spans[lid] / total if total > 0 else 1.0 / len(counts))
        n += more * (db["n"] - da["n"])
        dma += more * max(0.0, db["dma_bytes"] - da["dma_bytes"])
        for k in COMPUTE:
            if k in busy:
                busy[k] += more * max(0.0, db.get(f"busy.{k}", 0.0) - da.get(f"busy.{k}", 0.0))
    if "dma" in busy and sb.dma_bytes:  # the timing's DMA busy (engine-ns per engine) at run b's rate per byte
        busy["dma"] *= dma / float(sb.dma_bytes)
    # a compute engine idle for part of run b (waiting for the first loads, for a phase's weights, the
    # tail) is idle as long in the whole kernel: the latency is at least run b's plus the busy time that
    # engine adds. The growth alone undercounts where run b overlapped a wait that run a did not
    # (swiglu's TensorE-bound three phases: 8% under a whole simulation, 0.6% with this floor)
    latency = max([latency] + [float(sb.latency_ns) + busy[k] - float(sb.busy_ns[k]) for k in COMPUTE if k in busy])
    return dict(
        latency_ns=latency,
        engine_busy_ns=busy,
        dma_bytes=int(round(dma)),
        instructions=int(round(n)),
        details={
            "timing": "extrapolated",
            "cut_loops": {str(k): list(v) for k, v in counts.items()},
            "simulated_instructions": a.instructions + len(tb.instructions),
        },
    )
