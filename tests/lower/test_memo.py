"""`ReadMemo` and the lowering's per-pass memo: a hit is what a fresh computation gives; a point that
changes a knob the computation read is computed again."""

from __future__ import annotations

import re

import numpy as np
import pytest

from axon.errors import AxonError
from axon.lower import lower
from axon.lower.emit import emit
from axon.lower.memo import KnobReads, ReadMemo
from axon.lower.roles import LoweringError
from axon.lower.space import Space
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


def _tile_area(knobs):
    """Reads tile_m, and tile_n only when tile_m is 128; rejects tile_m 32."""
    if knobs["tile_m"] == 32:
        raise LoweringError(f"tile_m {knobs['tile_m']} too small")
    return knobs["tile_m"] * (knobs["tile_n"] if knobs["tile_m"] == 128 else 1)


def test_a_hit_needs_every_read_knob_equal_and_ignores_the_rest():
    memo: ReadMemo[int] = ReadMemo()
    calls = []

    def compute(knobs):
        calls.append(dict(knobs.reads))
        return _tile_area(knobs)

    assert memo({"tile_m": 64, "tile_n": 512, "bufs": 1}, compute) == 64
    assert memo({"tile_m": 64, "tile_n": 128, "bufs": 3}, compute) == 64  # tile_n, bufs not read at 64
    assert len(calls) == 1 and (memo.hits, memo.misses) == (1, 1)
    assert memo({"tile_m": 128, "tile_n": 512}, compute) == 128 * 512
    assert memo({"tile_m": 128, "tile_n": 256}, compute) == 128 * 256  # tile_n read at 128: computed again
    assert memo({"tile_m": 128, "tile_n": 512, "bufs": 2}, compute) == 128 * 512
    assert (memo.hits, memo.misses) == (2, 3)


def test_values_are_compared_with_their_type_and_absent_knobs_count():
    memo: ReadMemo[str] = ReadMemo()

    def compute(knobs):
        return f"{knobs['tile_m']!r} {knobs.get('psum_bufs', 'absent')}"

    assert memo({"tile_m": 64}, compute) == "64 absent"
    assert memo({"tile_m": 64.0}, compute) == "64.0 absent"  # equal, but another value to the lowering
    assert memo({"tile_m": 64, "psum_bufs": 2}, compute) == "64 2"
    assert memo({"tile_m": 64}, compute) == "64 absent"
    assert memo.misses == 3


def test_errors_are_kept_and_raised_again_with_their_type_and_message():
    memo: ReadMemo[int] = ReadMemo()
    for _ in range(2):
        with pytest.raises(LoweringError, match="tile_m 32 too small"):
            memo({"tile_m": 32, "tile_n": 512}, _tile_area)
    assert (memo.hits, memo.misses) == (1, 1)

    def bug(knobs):
        raise ZeroDivisionError(knobs["tile_m"])

    with pytest.raises(ZeroDivisionError):  # not an AxonError: not kept
        memo({"tile_m": 1}, bug)
    assert len(memo) == 1


def test_iterating_the_knobs_depends_on_all_of_them_and_unhashable_values_are_not_kept():
    memo: ReadMemo[int] = ReadMemo()
    assert memo({"a": 1, "b": 2}, lambda k: sum(k.values())) == 3
    assert memo({"a": 1, "b": 5}, lambda k: sum(k.values())) == 6
    assert memo({"a": 1, "b": 2}, lambda k: -1) == 3  # the stored result of the first point
    assert memo({"a": [1], "b": 2}, lambda k: len(k["a"])) == 1
    assert len(memo) == 2


def test_the_oldest_results_go_past_the_limit():
    memo: ReadMemo[int] = ReadMemo(limit=3)
    for m in range(5):
        memo({"tile_m": m}, lambda k: k["tile_m"])
    assert len(memo) == 3
    assert memo({"tile_m": 0}, lambda k: -1) == -1  # dropped: computed again
    assert memo({"tile_m": 4}, lambda k: -1) == 4


def test_knob_reads_is_a_read_only_mapping_that_notes_lookups():
    view = KnobReads({"tile_m": 64, "bufs": 2})
    assert view["tile_m"] == 64 and view.get("tile_n") is None and "bufs" in view
    assert set(view.reads) == {"tile_m", "tile_n", "bufs"}
    with pytest.raises(KeyError):
        view["evac"]


def _pass_memos(graph):
    """The lowering's per-pass memos of `graph` (kept in the memo of its normalized graph)."""
    normalized = graph.__dict__.get("_memo", {}).get(("normalized",))
    cache = normalized.__dict__.get("_memo", {}) if normalized is not None else {}
    return {k: v for k, v in cache.items() if k[0] == "lowered_pass"}


def _fresh(graph_name, point, preset="small"):
    """The point lowered on a new graph object (no memo of an earlier lowering can answer)."""
    graph = get(graph_name).graph(preset)
    assert not _pass_memos(graph)
    return emit(lower(graph, point, HW))


@pytest.mark.parametrize("workload", ["rmsnorm_matmul", "layernorm_matmul", "attention"])
def test_memoized_lowering_emits_what_a_fresh_lowering_emits(workload):
    graph = get(workload).graph("small")
    space = Space(graph, HW)
    rng = np.random.default_rng(0)
    base = space.default_point().as_dict()
    points = [base] + [{k.name: k.choices[int(rng.integers(len(k.choices)))] for k in space.knobs} for _ in range(6)]
    for k in space.knobs:  # every one-knob neighbour of the default point
        points += [{**base, k.name: c} for c in k.choices[1:]]
    for point in points + points[::-1]:  # the later points and the second round are answered from the memo
        try:
            got = emit(lower(graph, point, HW))
        except AxonError as exc:
            with pytest.raises(type(exc), match="^" + re.escape(str(exc)) + "$"):
                _fresh(workload, point)
            continue
        assert got == _fresh(workload, point), point
    assert sum(m.hits for m in _pass_memos(graph).values()) > 0


def test_a_neighbour_in_a_knob_one_pass_ignores_reuses_that_pass():
    graph = get("rmsnorm_matmul").graph("small")
    point = {**Space(graph, HW).default_point().as_dict(), "fusion": "unfused"}
    lower(graph, point, HW)
    memos = list(_pass_memos(graph).values())
    assert len(memos) > 1  # unfused: several passes
    before = [(m.hits, m.misses) for m in memos]
    neighbour = {**point, "tile_n": 256 if point["tile_n"] != 256 else 128}  # only the matmul pass reads tile_n
    assert emit(lower(graph, neighbour, HW)) == _fresh("rmsnorm_matmul", neighbour)
    after = [(m.hits, m.misses) for m in memos]
    assert any(a[0] > b[0] for a, b in zip(after, before))  # a pass that does not read tile_n was reused
    assert any(a[1] > b[1] for a, b in zip(after, before))  # the matmul pass was lowered again
