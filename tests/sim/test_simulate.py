"""The simulator's helpers that rebuild instructions."""

from __future__ import annotations

from dataclasses import fields, replace

from axon.sim.balance import on_engine as _on_engine
from axon.target.trace import AUTO_ENGINE, Access, Instr


def test_moving_an_instruction_to_another_engine_keeps_every_other_field():
    a = Access(3, "sbuf", 0, 128, 0, 512, 128 * 512, 4)
    ins = Instr(7, "tensor_copy", "vector", 128, 128, "float32", (a,), (a,), 12, ((0, "affine", 1),), (AUTO_ENGINE,))
    moved = _on_engine(ins, "scalar")
    assert moved == replace(ins, engine="scalar")
    assert len(fields(Instr)) == 11  # every field is copied: a new field must be added to _on_engine
