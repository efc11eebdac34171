"""How an instruction sequence loads VectorE and ScalarE, for ranking verified alternatives.

`axon.synth.isel` offers the fewest-instruction sequences first, then the ones that share the work
best between the engines (`balance_cost`), then one engine twin (`scalar_twin`). Published costs,
for ordering only: the tuner measures; nothing here proves anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from axon.synth.groups import Alternative, Step

# Published per-element costs (HARDWARE.md section 3) in engine cycles, for ranking only (the tuner
# measures): VectorE tensor_tensor and scalar_tensor_tensor stream at 2 cycles per fp32 element,
# tensor_scalar (one or two ops) at 1, reciprocal at 8; ScalarE activations at 1.
_VECTOR_CYCLES = {"tensor_tensor": 2.0, "scalar_tensor_tensor": 2.0, "reciprocal": 8.0}


def balance_cost(seq: tuple[Step, ...]) -> float:
    """Per-element cycles of the busiest of VectorE and ScalarE for `seq` (GpSimd counts as VectorE:
    on trn1 they share the SBUF read port)."""
    busy = {"vector": 0.0, "scalar": 0.0}
    for s in seq:
        eng = "scalar" if s.engine == "scalar" else "vector"
        busy[eng] += _VECTOR_CYCLES.get(s.opcode, 1.0) if eng == "vector" else 1.0
    return max(busy.values())


def engine_cost(seq: tuple[Step, ...]) -> int:
    # a tie-break only (the tuner measures): VectorE reciprocal is 8x, ScalarE is the cheap activation engine
    return sum(8 if s.opcode == "reciprocal" else 1 for s in seq)


def scalar_twin(
    out: list[Alternative], offered: list[Alternative], kinds: Mapping[int, str], first: float
) -> list[Alternative]:
    """At most one more alternative, appended (the others keep their index): a found sequence with
    its two-op VectorE tensor_scalars over full tiles on ScalarE, where that loads the busier of the
    two engines less than the first offered sequence (`first`, like the balanced extras) and no more
    than any other, and no offered sequence runs the same instructions on each engine. The search
    proposes two-op tensor_scalars on VectorE only (ScalarE has one-op ones), so a normalization's
    (x - mean) / std is otherwise offered as one-op steps plus a scalar_tensor_tensor, or on VectorE
    whole; the value is the same on any engine (nki.isa.tensor_scalar's `engine`), so the twin needs
    no proof of its own."""

    def full_steps(seq: tuple[Step, ...]) -> list[bool]:  # which steps write full tiles
        full: list[bool] = []
        for s in seq:
            full.append(
                s.opcode not in ("tensor_reduce", "activation_reduce", "tensor_scalar_reduce")
                and any(
                    (v[0] == "in" and kinds.get(v[1]) in ("full", "bcast")) or (v[0] == "step" and full[v[1]])
                    for _, v in s.args
                    if isinstance(v, tuple) and v[0] in ("in", "step")
                )
            )
        return full

    def movable(s: Step, full: bool) -> bool:
        return s.opcode == "tensor_scalar" and s.engine == "vector" and "op1" in dict(s.args) and full

    def mix(seq: tuple[Step, ...]) -> tuple[tuple[str, str], ...]:
        # the instructions each engine runs (ScalarE streams an activation and a tensor_scalar alike)
        return tuple(sorted((s.engine, "stream" if s.engine == "scalar" else s.opcode) for s in seq))

    bar = min((balance_cost(a.steps) for a in offered), default=0.0)
    have = {mix(a.steps) for a in offered}  # a twin with the mix of an offered sequence adds nothing
    twins = []
    for a in out:
        wide = full_steps(a.steps)
        if any(movable(s, f) for s, f in zip(a.steps, wide)):
            steps = tuple(Step(s.opcode, "scalar", s.args) if movable(s, f) else s for s, f in zip(a.steps, wide))
            if mix(steps) not in have and balance_cost(steps) <= bar and balance_cost(steps) < first:
                twins.append((balance_cost(steps), len(steps), Alternative(steps, a.proof)))
    return [min(twins, key=lambda t: t[:2])[2]] if twins else []
