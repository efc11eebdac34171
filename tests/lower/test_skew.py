"""The row-block loop of a matmul pass, software-pipelined by one block (`axon.lower.skew`)."""

import numpy as np
import pytest

import axon.nki
from axon.ir import max_rel_error, reference_case
from axon.lower import Rejected, emit, lower
from axon.lower.index import Affine, Expr
from axon.lower.program import TileInstr, TileLoop, tile_ref
from axon.lower.skew import skew
from axon.lower.space import Space
from axon.sim import simulate
from axon.target import load_hw
from axon.workloads import all_workloads, get

from .conftest import TOL

HW = load_hw("trn1")


def _copy(dst: str, src: str, var: str = "i_r") -> TileInstr:
    return TileInstr(
        "tensor_copy",
        "vector",
        tile_ref(dst, 0, 128, Affine.of(var) * 128, 128),
        (("src", tile_ref(src, 0, 128, 0, 128)),),
    )


def test_skew_moves_the_preparation_one_block_ahead_and_fixes_the_ends():
    block = [_copy("prep", "x"), _copy("out", "prep2")]
    out = skew(block, 1, "i_r", 4, "row_block", rotated=set())
    assert out is not None and len(out) == 3
    prologue, loop, epilogue = out
    assert isinstance(loop, TileLoop) and loop.extent == 3
    assert prologue.dst.index[1][0].render() == "0"  # block 0's preparation, before the loop
    assert loop.body[0].dst.index[1][0].render() == "128 * i_r + 128"  # block r+1's, inside
    assert loop.body[1].dst.index[1][0].render() == "128 * i_r"
    assert epilogue.dst.index[1][0].render() == "384"  # the last block's rest, after the loop


def test_skew_refuses_what_would_change_the_result():
    # the rest reads a tile the preparation writes (not rotating): block r+1 would overwrite it first
    assert skew([_copy("t", "x"), _copy("out", "t")], 1, "i_r", 4, "row_block", rotated=set()) is None
    assert skew([_copy("t", "x"), _copy("out", "t")], 1, "i_r", 4, "row_block", rotated={"t"}) is not None
    # the preparation reads a tile the rest writes
    assert skew([_copy("a", "t"), _copy("t", "x")], 1, "i_r", 4, "row_block", rotated=set()) is None
    assert skew([_copy("a", "x"), _copy("b", "y")], 1, "i_r", 1, "row_block", rotated=set()) is None  # one block


def test_modulus_and_division_see_the_shifted_variable():
    e = Affine.of("i_r").modulo(2, 1024)
    assert e.shifted("i_r", 1).value({"i_r": 3}) == 0 and e.fixed("i_r", 3).value({}) == 1024
    assert Expr.of(Affine.of("i_k") * 4).parts[0].shifted("i_r", 1) == Affine.of("i_k") * 4


def test_skewed_matmul_is_correct_in_the_emulator_and_hides_the_block_boundaries():
    graph = get("matmul").graph(None, dtype="bfloat16", M=2048, K=1024, N=2048)
    point = {
        **Space(graph, HW).default_point().as_dict(),
        "bufs": 2, "psum_bufs": 2, "transpose": "pe", "tile_n": 512, "loop_order": "kn2", "weights": "resident",
    }  # fmt: skip
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, 1024)).astype(np.float32) + 3.0  # far from zero-mean
    b = rng.standard_normal((1024, 2048)).astype(np.float32)

    def run(skewed: bool) -> float:
        src = emit(lower(graph, {**point, "skew": skewed}, HW))
        got = np.asarray(axon.nki.run(src, a, b, hw=HW), dtype=np.float64)
        want = a.astype(np.float64) @ b.astype(np.float64)
        assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-2  # bf16 output
        fn = axon.nki.load_source(src, "matmul")
        return simulate(
            axon.nki.trace(fn, ((2048, 1024), "bfloat16"), ((1024, 2048), "bfloat16"), hw=HW), HW
        ).latency_ns

    skewed, plain = run(True), run(False)
    assert skewed < 0.99 * plain, (skewed, plain)


SKEWED = [w.name for w in all_workloads() if any(n.op == "matmul" for n in w.graph("small").nodes)]


@pytest.mark.parametrize("name", SKEWED)
def test_every_matmul_workload_skewed_computes_its_reference(name):
    """The emitted source with the row-block loop skewed, run by the emulator, against float64."""
    graph = get(name).graph("small")
    space = Space(graph, HW)
    knobs = {k.name for k in space.knobs}
    point = {**space.default_point().as_dict(), "bufs": 2, "skew": True, "tile_m": 64}
    if "transpose" in knobs:
        point["transpose"] = "pe"
    try:
        prog = lower(graph, point, HW)
    except Rejected:
        pytest.skip("point does not fit")
    src = emit(prog)
    assert src != emit(lower(graph, {**point, "skew": False}, HW)), "the loop was not skewed"
    x, ref = reference_case(graph)
    res = axon.nki.run(src, *[x[t.name] for t in prog.inputs], hw=HW)
    res = res if isinstance(res, (tuple, list)) else (res,)
    got = {n: np.asarray(r, dtype=np.float64) for n, r in zip(prog.output_names, res)}
    assert max_rel_error(got, ref) <= TOL["float32"], name
