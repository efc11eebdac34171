"""Small builders of the nest's references and instructions: a 2-D tile slice, a PSUM bank slot,
an instruction bound to its engine, a slot index that rotates with the step. Nothing else."""

from __future__ import annotations

from typing import Any

from axon.lower.program import Affine, Expr, Ref, TileInstr
from axon.target.isa import ISA

_ENGINE_ARG = {
    "tensor": "nisa.tensor_engine",
    "vector": "nisa.vector_engine",
    "scalar": "nisa.scalar_engine",
    "gpsimd": "nisa.gpsimd_engine",
}


def ref2(t: str, p0: Any, p: int, f0: Any, f: int) -> Ref:
    """t[p0:p0+p, f0:f0+f]."""
    return Ref(t, ((Expr.of(p0), p), (Expr.of(f0), f)))


def bank(t: str, slot: Any, p: int, f0: Any, f: int) -> Ref:
    """t[slot, 0:p, f0:f0+f] of a PSUM tensor of several banks."""
    return Ref(t, ((Expr.of(slot), None), (Expr.of(0), p), (Expr.of(f0), f)))


def on(opcode: str, engine: str, dst: Ref, args: tuple[tuple[str, Any], ...], comment: str = "") -> TileInstr:
    """An instruction bound to `engine` in the emitted source (not left to the compiler) where the
    instruction can run on several engines; a one-engine instruction takes no `engine` argument.
    A copy on ScalarE is `activation(op=nl.copy)`: NeuronCore-v2 has no ScalarE tensor_copy
    (nki.isa.tensor_copy: "use nisa.activation with op=nl.copy"), and v3 runs either."""
    if opcode == "tensor_copy" and engine == "scalar":
        return TileInstr("activation", "scalar", dst, (("op", "nl.copy"), ("data", dict(args)["src"])), comment)
    if len(ISA[opcode].engines) > 1:
        args = args + (("engine", _ENGINE_ARG[engine]),)
    return TileInstr(opcode, engine, dst, args, comment)


def mod(j: Affine, n: int, mul: int) -> Affine:
    """(j % n) * mul; a constant for a constant j."""
    if not j.terms:
        return Affine((), (j.const % n) * mul)
    return j.modulo(n, mul)
