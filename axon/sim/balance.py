"""Where the Neuron compiler places the instructions a kernel left unbound (`AUTO_ENGINE`).

The compiler assigns engines before it schedules, knowing the whole instruction stream: an unbound
instruction goes where its loop body's work is lightest. So the balance here is static and per loop
nest (the enclosing loops' ids, not their iterations): the work in that nest that has one possible
engine (bound by the kernel, or unbound but runnable on one engine only) is counted first, then each
other unbound instruction, in program order, goes to the engine whose load after taking it is the
smaller (a tie keeps the ISA's default engine). The
default engine stays a candidate (an unbound nc_transpose is TensorE's), and an instruction moves
only where it can run: VectorE transposes at most 32x32, as the emulator enforces for a bound one.

Evidence (`experiments/calibration.py`): NKIBench adamw on trn1 leaves six `tensor_scalar` per
tile unbound beside five `tensor_tensor` and a reciprocal that only VectorE runs; the profile has
ScalarE active 62% and VectorE 90%. Placing each unbound instruction on the engine that would
finish it first when it is issued (the earlier rule) sent a third of them to VectorE, which the
simulator then kept 98% busy with ScalarE at 39%.
"""

from __future__ import annotations

from collections.abc import Callable

from axon.target import costs as C
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA, ISA_LIMITS
from axon.target.trace import AUTO_ENGINE, Instr, Trace

# Engines the Neuron compiler balances an unbound instruction over (it leaves GpSimd alone: the
# measured kernels keep it ~1% busy).
BALANCED = ("vector", "scalar")


def place_unbound(trace: Trace, hw: HardwareSpec) -> dict[int, Instr]:
    """Position in `trace.instructions` -> the instruction on its engine, for every unbound
    instruction that moves off its ISA default engine (the others keep `Instr.engine`).

    The compiler places an instruction of the source once, for every iteration of its loops: the
    balance is over one iteration of each loop nest (its first), and an instruction's later
    iterations go where its first did. So the placement repeats with the loops, whatever their trip
    counts (a kernel cut short for extrapolation is placed as the whole kernel is)."""
    if not any(AUTO_ENGINE in ins.attrs for ins in trace.instructions):
        return {}
    clocks = {e: hw.engines[e].clock_ghz for e in (*BALANCED, "tensor")}
    cost: dict[tuple, float] = {}

    def ns(ins: Instr) -> float:
        key = (ins.opcode, ins.engine, ins.partitions, ins.free_size, ins.dtype, ins.attrs)
        hit = cost.get(key)
        if hit is None:
            hit = cost[key] = C.engine_cycles(ins, hw) / clocks[ins.engine]
        return hit

    first: dict[tuple[int, ...], tuple[int, ...]] = {}  # nest -> the iteration it was first seen in
    load: dict[tuple[int, ...], dict[str, float]] = {}  # nest -> its first iteration's work per engine
    for ins in trace.instructions:
        nest, its = _nest(ins)
        if first.setdefault(nest, its) == its and ins.engine in clocks and len(_candidates(ins, clocks)) <= 1:
            load.setdefault(nest, dict.fromkeys(clocks, 0.0))[ins.engine] += ns(ins)
    placed: dict[tuple, str] = {}  # site (nest, opcode, occurrence in its iteration) -> engine
    occurrences: dict[tuple, int] = {}  # (nest, iteration, opcode) -> how many so far
    moved: dict[int, Instr] = {}
    for i, ins in enumerate(trace.instructions):
        if AUTO_ENGINE not in ins.attrs:
            continue
        engines = _candidates(ins, clocks)
        if len(engines) <= 1:
            continue
        nest, its = _nest(ins)
        key = (nest, its, ins.opcode)
        occurrences[key] = k = occurrences.get(key, 0) + 1
        site = (nest, ins.opcode, k)
        engine = placed.get(site)
        if engine is None:
            engine = placed[site] = _lighter(ins, engines, load.setdefault(nest, dict.fromkeys(clocks, 0.0)), ns)
        if engine != ins.engine:
            moved[i] = on_engine(ins, engine)
    return moved


def _lighter(ins: Instr, engines: list[str], nest: dict[str, float], ns: Callable[[Instr], float]) -> str:
    """Of `engines` (`_candidates`), the one where `nest`'s load after taking `ins` is smallest (a tie
    keeps its default); booked."""
    best, best_load = ins.engine, -1.0
    for e in engines:
        after = nest[e] + ns(ins if e == ins.engine else on_engine(ins, e))
        if best_load < 0 or after < best_load or (after == best_load and e == ins.engine):
            best, best_load = e, after
    if best_load >= 0:
        nest[best] = best_load
    return best


def _candidates(ins: Instr, clocks: dict) -> list[str]:
    """The engines `ins` may be placed on: its own if the kernel bound it, else those of `BALANCED`
    (and its ISA default) that run its opcode within their size limits."""
    if AUTO_ENGINE not in ins.attrs:
        return [ins.engine]
    return [
        e
        for e in (BALANCED if ins.engine in BALANCED else (ins.engine, *BALANCED))
        if e in ISA[ins.opcode].engines and e in clocks and _fits(ins, e)
    ]


def _fits(ins: Instr, engine: str) -> bool:
    """Whether `ins` may move to `engine` within that engine's size limits."""
    if ins.opcode == "nc_transpose" and engine == "vector":
        return max(ins.partitions, ins.free_size) <= ISA_LIMITS["vector_transpose_max"]
    return True


def _nest(ins: Instr) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the enclosing loops' ids, their iterations)."""
    return tuple(lid for lid, _kind, _it in ins.loops), tuple(it for _lid, _kind, it in ins.loops)


def on_engine(ins: Instr, engine: str) -> Instr:
    """`dataclasses.replace(ins, engine=engine)`, built directly: it runs for most instructions of
    kernels that leave the engine to the compiler, where `replace` was a few percent of a tune."""
    return Instr(
        ins.index, ins.opcode, engine, ins.partitions, ins.free_size, ins.dtype, ins.reads, ins.writes, ins.line,
        ins.loops, ins.attrs,
    )  # fmt: skip
