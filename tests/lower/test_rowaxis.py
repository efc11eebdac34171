"""Rows fewer than a partition tile ([B, 1, D], a decode step; [B, 4, D]) are lowered with the axis before
them merged in (`axon.lower.rowaxis`): full partitions, the spec's shapes at the kernel's boundary, the
same values."""

from __future__ import annotations

import numpy as np
import pytest

import axon.nki
import axon.spec as ax
from axon.ir import max_rel_error, reference_case, trace
from axon.lower import lower
from axon.lower.emit import emit
from axon.lower.interpret import interpret
from axon.lower.rowaxis import merge_rows
from axon.lower.space import Space
from axon.target import load_hw

HW = load_hw("trn1")


@ax.spec(x="B S D", g="D")
def norm(x, g):
    return x / ax.sqrt(ax.mean(x * x) + 1e-6) * g


@ax.spec(x="B D", g="D")
def norm_2d(x, g):
    return x / ax.sqrt(ax.mean(x * x) + 1e-6) * g


@ax.spec(x="B S K", w="K N", b="B S N")
def projection(x, w, b):
    return ax.tanh(x @ w) + b


@ax.spec(x="B S D")
def over_rows(x):
    return x - ax.mean(x, axis=1)


@ax.spec(x="B S K", w="B K N")
def batched(x, w):
    return x @ w


def _run(graph, point=None):
    """The default point's kernel: its interpreted program and emitted source, each against float64."""
    space = Space(graph, HW)
    prog = lower(graph, point or space.default_point(), HW)
    inputs, expected = reference_case(graph)
    assert max_rel_error(interpret(prog, inputs), expected) < 1e-5
    src = emit(prog)
    out = axon.nki.run(src, *[inputs[n] for n in graph.input_names], hw=HW)  # the spec's shapes
    assert np.shape(out) == graph.concrete_shape(graph.outputs[0])
    assert max_rel_error({graph.output_names[0]: np.asarray(out, np.float64)}, expected) < 1e-5
    return prog, src


def test_a_decode_step_norm_lowers_on_full_partitions_as_fast_as_the_same_rows_2d():
    prog, src = _run(trace(norm, B=64, S=1, D=512))
    assert "x = x.reshape((1, 64, 512))" in src and "return out_hbm" in src
    assert "nl.ndarray((64, 1, 512)" in src  # the result in the spec's shape
    flat, _ = _run(trace(norm_2d, B=64, D=512))
    # before: 64 row blocks of one partition each, 10x the latency of the same values as [B, D]
    assert prog.stats().instructions == flat.stats().instructions


def test_a_few_rows_per_batch_are_merged_into_row_blocks_that_span_batches():
    """[16, 24, D]: 16 row blocks of 24 partitions (19%) before; 384 rows in blocks of 128 now."""
    prog, src = _run(trace(norm, B=16, S=24, D=256))
    assert "x = x.reshape((1, 384, 256))" in src and dict(prog.views)["out"] == (16, 24, 256)
    flat, _ = _run(trace(norm_2d, B=384, D=256))
    assert prog.stats().instructions == flat.stats().instructions


@ax.spec(x="B S D", y="B S D", g="D")
def gated(x, y, g):
    return x * ax.sigmoid(y) * g


def test_a_broadcast_over_both_merged_axes_stays_as_it_is():
    @ax.spec(x="B S D", s="1 1 D")
    def scaled(x, s):
        return x * s

    graph = trace(scaled, B=8, S=3, D=256)
    prog, _ = _run(graph)
    assert dict(prog.views) == {"x": (8, 3, 256), "out": (8, 3, 256)}
    assert merge_rows(trace(gated, B=8, S=3, D=256), HW.memory.partitions) is not None


def test_a_decode_step_projection_with_a_2d_weight_lowers_over_the_batch():
    graph = trace(projection, B=96, S=1, K=256, N=512)
    assert merge_rows(graph, HW.memory.partitions) is not None
    prog, _ = _run(graph)
    assert dict(prog.views) == {"x": (96, 1, 256), "b": (96, 1, 512), "out": (96, 1, 512)}


@pytest.mark.parametrize(
    "graph",
    [
        trace(norm, B=4, S=128, D=512),  # rows that fill the partitions: nothing to gain
        trace(norm, B=1, S=1, D=512),  # nothing to gain
        trace(over_rows, B=64, S=1, D=512),  # a reduction over the rows axis
        trace(batched, B=8, S=1, K=128, N=256),  # a weight per batch: its rows are K
        trace(batched, B=8, S=4, K=4, N=64),  # the same, its K as deep as the rows: [8, 4, 4] @ [8, 4, 64]
    ],
    ids=["full-rows", "one-row", "reduce-rows-axis", "batched-weight", "batched-weight-k-as-s"],
)
def test_graphs_where_the_swap_is_not_the_same_computation_are_left_as_they_are(graph):
    assert merge_rows(graph, HW.memory.partitions) is None


def test_a_decode_step_spec_tunes_to_a_kernel_that_verifies_from_its_file(tmp_path):
    from axon.search.api import TuneRequest, tune
    from axon.search.provenance import verify

    (tmp_path / "decode.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='B S D', g='D')\n"
        "def decode_norm(x, g):\n    return x / ax.sqrt(ax.mean(x * x) + 1e-6) * g\n"
    )
    shape = {"B": 64, "S": 1, "D": 512}
    report = tune(
        TuneRequest.make(
            f"{tmp_path}/decode.py:decode_norm", shape=shape, trials=3, workdir=tmp_path / "w", track=False
        )
    )
    assert report.numerics.ok and "x = x.reshape((1, 64, 512))" in open(report.kernel_path).read()
    assert verify(report.kernel_path).ok


def test_a_vector_per_batch_is_refused_as_not_lowered_not_as_not_broadcasting():
    """[B, 1, D] times [B, S, D] broadcasts in NumPy; the line said 'does not broadcast over rows', which
    reads as a mistake in the spec."""
    from axon.lower.roles import LoweringError

    @ax.spec(x="B S D", s="B 1 D")
    def per_batch(x, s):
        return x * s

    graph = trace(per_batch, B=4, S=20, D=128)
    with pytest.raises(LoweringError, match=r"a row vector per batch .* is not lowered: only a vector the same"):
        lower(graph, Space(graph, HW).default_point(), HW)


@ax.spec(x="B S D", c="S D/2", s="S D/2")
def rope_per_position(x, c, s):
    a, b = ax.split(x, 2)
    return ax.concat([a * c - b * s, a * s + b * c], axis=-1)


@ax.spec(x="B S D", p="1 S D", w="D N")
def position_then_projection(x, p, w):
    return ax.gelu(x + p) @ w


@pytest.mark.parametrize(
    "graph",
    [trace(rope_per_position, B=24, S=1, D=128), trace(position_then_projection, B=40, S=1, D=128, N=64)],
    ids=["S-D-table", "1-S-D-table"],
)
def test_a_decode_step_with_a_per_position_table_is_merged_and_computes_its_spec(graph):
    """A table over positions ("S D" or "1 S D") at S=1 made tune refuse the spec: 'no variant can be
    lowered: mul: shapes [1, B*S, D/2] and [S, D/2] do not broadcast (axis -2: B*S vs S)'."""
    assert merge_rows(graph, HW.memory.partitions) is not None
    prog, _ = _run(graph)
    assert dict(prog.views)["x"] == graph.concrete_shape(graph.inputs[0].id)
