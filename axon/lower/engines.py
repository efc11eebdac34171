"""Engine balance: VectorE `tensor_scalar` instructions moved to ScalarE (knob `offload`).

`tensor_scalar` ((data op0 operand0) op1 operand1, operands immediates or per-partition [P, 1]
vectors) runs on VectorE, ScalarE or GpSimd with the same semantics (nki.isa.tensor_scalar, its
`engine` argument), so moving one changes no value: nothing is re-proved. Elementwise kernels are
usually VectorE-bound while ScalarE idles; `offload` says how many of a pass's VectorE
tensor_scalars over full tiles go to ScalarE: "none", "half" (every other one, in program order)
or "all". Instructions on per-row [P, 1] vectors stay (they are cheap and on VectorE's critical
path anyway).
"""

from __future__ import annotations

import dataclasses

from axon.lower.program import Stmt, TileInstr, TileLoop

OFFLOAD_CHOICES = ("none", "half", "all")
SCALAR_ENGINE = "nisa.scalar_engine"


def offload_tensor_scalars(stmts: list[Stmt], mode: str) -> list[Stmt]:
    """`stmts` with the chosen VectorE tensor_scalar instructions on ScalarE (see the module doc)."""
    if mode == "none":
        return stmts
    if mode not in OFFLOAD_CHOICES:
        raise ValueError(f"offload: {mode!r} is not one of {OFFLOAD_CHOICES}")
    seen = [0]

    def movable(s: TileInstr) -> bool:
        return s.opcode == "tensor_scalar" and s.engine == "vector" and s.arg("engine") is None and s.free_size > 1

    def walk(ss: list[Stmt] | tuple[Stmt, ...]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in ss:
            if isinstance(s, TileLoop):
                out.append(dataclasses.replace(s, body=tuple(walk(s.body))))
            elif isinstance(s, TileInstr) and movable(s):
                seen[0] += 1
                if mode == "all" or seen[0] % 2 == 1:
                    s = dataclasses.replace(s, engine="scalar", args=(*s.args, ("engine", SCALAR_ENGINE)))
                out.append(s)
            else:
                out.append(s)
        return out

    return walk(stmts)
