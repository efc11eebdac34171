"""Where the Neuron compiler places the instructions a kernel left unbound (`AUTO_ENGINE`).

The compiler assigns engines before it schedules, knowing the whole instruction stream: an unbound
instruction goes where its loop body's work is lightest. So the balance here is static and per loop
nest (the enclosing loops' ids, not their iterations): the work the kernel bound to VectorE and
ScalarE in that nest is counted first, then each unbound instruction, in program order, goes to the
engine whose load after taking it is the smaller (a tie keeps the ISA's default engine). The
default engine stays a candidate (an unbound nc_transpose is TensorE's), and an instruction moves
only where it can run: VectorE transposes at most 32x32, as the emulator enforces for a bound one.

Evidence (`experiments/calibration.py`): NKIBench adamw on trn1 leaves six `tensor_scalar` per
tile unbound beside five `tensor_tensor` and a reciprocal that only VectorE runs; the profile has
ScalarE active 62% and VectorE 90%. Placing each unbound instruction on the engine that would
finish it first when it is issued (the earlier rule) sent a third of them to VectorE, which the
simulator then kept 98% busy with ScalarE at 39%.
"""

from __future__ import annotations

from axon.target import costs as C
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA, ISA_LIMITS
from axon.target.trace import AUTO_ENGINE, Instr, Trace

# Engines the Neuron compiler balances an unbound instruction over (it leaves GpSimd alone: the
# measured kernels keep it ~1% busy).
BALANCED = ("vector", "scalar")


def place_unbound(trace: Trace, hw: HardwareSpec) -> dict[int, Instr]:
    """Position in `trace.instructions` -> the instruction on its engine, for every unbound
    instruction that moves off its ISA default engine (the others keep `Instr.engine`)."""
    unbound = [(i, ins) for i, ins in enumerate(trace.instructions) if AUTO_ENGINE in ins.attrs]
    if not unbound:
        return {}
    clocks = {e: hw.engines[e].clock_ghz for e in (*BALANCED, "tensor")}
    load: dict[tuple[int, ...], dict[str, float]] = {}
    cost: dict[tuple, float] = {}

    def ns(ins: Instr) -> float:
        key = (ins.opcode, ins.engine, ins.partitions, ins.free_size, ins.dtype, ins.attrs)
        hit = cost.get(key)
        if hit is None:
            hit = cost[key] = C.engine_cycles(ins, hw) / clocks[ins.engine]
        return hit

    for ins in trace.instructions:
        if ins.engine in clocks and AUTO_ENGINE not in ins.attrs:
            nest = load.setdefault(_nest(ins), dict.fromkeys(clocks, 0.0))
            nest[ins.engine] += ns(ins)
    moved: dict[int, Instr] = {}
    for i, ins in unbound:
        nest = load.setdefault(_nest(ins), dict.fromkeys(clocks, 0.0))
        allowed = ISA[ins.opcode].engines
        best, best_load = ins, -1.0
        for e in BALANCED if ins.engine in BALANCED else (ins.engine, *BALANCED):
            if e not in allowed or e not in clocks or not _fits(ins, e):
                continue
            cand = ins if e == ins.engine else on_engine(ins, e)
            after = nest[e] + ns(cand)
            if best_load < 0 or after < best_load or (after == best_load and e == ins.engine):
                best, best_load = cand, after
        if best_load >= 0:
            nest[best.engine] = best_load
        if best is not ins:
            moved[i] = best
    return moved


def _fits(ins: Instr, engine: str) -> bool:
    """Whether `ins` may move to `engine` within that engine's size limits."""
    if ins.opcode == "nc_transpose" and engine == "vector":
        return max(ins.partitions, ins.free_size) <= ISA_LIMITS["vector_transpose_max"]
    return True


def _nest(ins: Instr) -> tuple[int, ...]:
    return tuple(lid for lid, _kind, _it in ins.loops)


def on_engine(ins: Instr, engine: str) -> Instr:
    """`dataclasses.replace(ins, engine=engine)`, built directly: it runs for most instructions of
    kernels that leave the engine to the compiler, where `replace` was a few percent of a tune."""
    return Instr(
        ins.index, ins.opcode, engine, ins.partitions, ins.free_size, ins.dtype, ins.reads, ins.writes, ins.line,
        ins.loops, ins.attrs,
    )  # fmt: skip
