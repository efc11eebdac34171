"""Row folding (knob `fold`), concat inputs placed in the concat's tile, loop-invariant loads hoisted,
rotating loads across batch iterations, and tensor_scalars moved to ScalarE (knob `offload`)."""

from __future__ import annotations

import numpy as np
import pytest

import axon.nki
from axon.ir import max_rel_error, reference_case
from axon.lower import LoweringError, emit, interpret, lower
from axon.lower.engines import offload_tensor_scalars
from axon.lower.fold import _split, fold_blocker, fold_choices
from axon.lower.program import Affine, Expr, TileInstr, TileLoop
from axon.lower.space import Space
from axon.target import load_hw
from axon.workloads import get

from .conftest import TOL

HW = load_hw("trn1")


def _check(graph, point, dtype="float32"):
    prog = lower(graph, point, HW)
    src = emit(prog)
    x, ref = reference_case(graph)
    assert max_rel_error(interpret(prog, x), ref) <= TOL[dtype], point
    res = axon.nki.run(src, *[x[t.name] for t in prog.inputs], hw=HW)
    res = res if isinstance(res, (tuple, list)) else (res,)
    got = {name: np.asarray(r, dtype=np.float64) for name, r in zip(prog.output_names, res)}
    assert max_rel_error(got, ref) <= TOL[dtype], (point, "emitted source")
    return prog, src


def _instrs(stmts):
    for s in stmts:
        if isinstance(s, TileLoop):
            yield from _instrs(s.body)
        elif isinstance(s, TileInstr):
            yield s


@pytest.mark.parametrize("name,offered", [("rope", True), ("adamw", True), ("layernorm", False), ("matmul", False)])
def test_fold_is_offered_only_where_every_value_is_elementwise_over_rows(name, offered):
    graph = get(name).graph("small")
    space = Space(graph, HW, isel={})
    assert ("fold" in [k.name for k in space.knobs]) == offered
    assert (fold_blocker(space.graph) is None) == offered


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("extra", [{}, {"bufs": 2}, {"bufs": 3, "m_block": 2, "tile_m": 32}])
def test_folded_rope_matches_reference_with_fewer_wider_transfers(extra, dtype):
    graph = get("rope").graph("small", dtype=dtype)
    plain = lower(graph, extra, HW).stats()
    prog, src = _check(graph, {**extra, "fold": 2}, dtype)
    folded = prog.stats()
    assert folded.dma_bytes <= plain.dma_bytes  # fewer when cos and sin load once (one block per head)
    assert folded.dma_transfers < plain.dma_transfers
    assert ".reshape((2, 128, 2, 128))" in src  # x [H, S, D] viewed as [H, S/2, 2, D]


def test_fold_with_a_ragged_last_block_matches_and_a_fold_not_dividing_rows_is_refused():
    _check(get("adamw").graph("small", M=200), {"fold": 4, "bufs": 2, "m_block": 2})
    with pytest.raises(LoweringError, match="fold"):
        lower(get("adamw").graph("small", M=202), {"fold": 4}, HW)


def test_split_offsets_into_slot_and_column():
    rot = Affine.of("i_r").modulo(2, 256)  # a rotating buffer of slots of 128 (m_block 2)
    slot, start = _split(Expr.of(rot) + Expr.of(Affine((("i_j", 128),), 64)), 128, "t")
    env = {"i_r": 3, "i_j": 1}
    assert start == 64 and slot.value(env) == (3 % 2) * 2 + 1
    with pytest.raises(LoweringError):
        _split(Expr.of(Affine((("i_j", 96),))), 128, "t")


def test_concat_inputs_are_written_in_place_and_invariant_inputs_load_once():
    graph = get("rope").graph("small")  # H=2, S=256: with fold 2 one row block covers a head
    prog, src = _check(graph, {"fold": 2, "bufs": 2})
    ops = prog.stats().opcodes
    assert ops.get("tensor_copy", 0) == 0  # the two halves are computed into the output tile
    head_loop = next(s for s in prog.body if isinstance(s, TileLoop))
    loads_before = [i for i in _instrs(prog.body[: prog.body.index(head_loop)]) if i.engine == "dma"]
    assert sorted(i.arg("src").tensor for i in loads_before) == ["cos", "sin"]
    assert "(i_b0 + i_r) % 2" in src  # x's two buffers alternate from one head to the next


@pytest.mark.parametrize("mode", ["half", "all"])
def test_offload_moves_full_tile_tensor_scalars_to_scalar_engine(mode):
    graph = get("adamw").graph("small")
    base = [i for i in _instrs(lower(graph, {}, HW).body) if i.opcode == "tensor_scalar" and i.free_size > 1]
    prog, src = _check(graph, {"offload": mode})
    moved = [i for i in _instrs(prog.body) if i.opcode == "tensor_scalar" and i.engine == "scalar"]
    assert base and len(moved) == (len(base) if mode == "all" else (len(base) + 1) // 2)
    assert all(i.arg("engine") == "nisa.scalar_engine" for i in moved)
    assert "engine=nisa.scalar_engine" in src
    assert offload_tensor_scalars(list(prog.body), "none") == list(prog.body)


def test_group_temporaries_rotate_with_the_loads_in_an_elementwise_pass():
    graph = get("gelu").graph("small")
    prog, src = _check(graph, {"bufs": 2})
    temps = {t.name: t for t in prog.tensors().values() if t.buffer == "sbuf" and "_s" in t.name}
    assert temps and all(t.shape[1] == 2 * 512 for t in temps.values())  # two slots of a row each
    writes = [i.dst for i in _instrs(prog.body) if i.dst.tensor in temps]
    assert writes and all("% 2" in r.render() for r in writes)
    _check(get("gelu").graph("small", M=200), {"bufs": 2, "m_block": 2})  # and in a ragged last block


def test_split_rows_view_hbm_as_shorter_rows_and_match():
    graph = get("gelu").graph("small")  # x [M=256, N=512]
    assert "split" in [k.name for k in Space(graph, HW, isel={}).knobs]
    assert "split" not in [k.name for k in Space(get("rope").graph("small"), HW, isel={}).knobs]  # slices
    prog, src = _check(graph, {"split": 4, "bufs": 2})
    assert "x.reshape((1024, 128))" in src and "out.reshape((1024, 128))" in src
    assert prog.inputs[0].shape == (256, 512)  # the kernel still takes x as given
    _check(get("adamw").graph("small", M=200), {"split": 2, "fusion": "unfused"})
    with pytest.raises(LoweringError, match="split"):
        lower(graph, {"split": 2, "fold": 2}, HW)


def test_interleave_issues_each_step_for_every_row_tile_of_the_block():
    graph = get("gelu").graph("small")
    prog, _ = _check(graph, {"m_block": 2, "interleave": True})
    loops = [s for s in _all_loops(prog.body) if s.name == "row_tile"]
    assert len(loops) >= 5 and all(len(loop.body) == 1 for loop in loops)  # one step per row-tile loop
    _check(get("layernorm").graph("small"), {"m_block": 2, "interleave": True})  # with reductions


def _all_loops(stmts):
    for s in stmts:
        if isinstance(s, TileLoop):
            yield s
            yield from _all_loops(s.body)


def test_fold_is_offered_only_for_rows_short_enough_to_gain():
    assert fold_choices(get("rope").graph("default")) == (1, 2, 4, 8, 16, 32)  # 512 B rows
    assert fold_choices(get("adamw").graph("default")) == (1, 2)  # 8 KB rows
    assert fold_choices(get("silu").graph("default")) == (1,)  # 28 KB rows: no fold knob
    assert "fold" not in [k.name for k in Space(get("silu").graph("default"), HW, isel={}).knobs]
    assert fold_choices(get("layernorm").graph("small")) == ()
