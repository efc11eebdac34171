"""Passes remembered by the knobs they read lower exactly as lowering afresh does, and the memo
tells apart what it must (values of another type, knobs a point lacks, a run that read everything)."""

from __future__ import annotations

import random

import pytest

from axon.errors import AxonError
from axon.lower import lower, lowering
from axon.lower.emit import emit
from axon.lower.knobmemo import remembered
from axon.lower.space import Space
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


class _Counted:
    """A function of the knobs that reads `a`, then `b` or `c` depending on `a`, and counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, knobs):
        self.runs += 1
        if knobs["a"] == 1:
            return ("b", knobs.get("b", "none"))
        if knobs["a"] == 2:
            raise AxonError(f"a=2 with c={knobs['c']}")
        return ("c", knobs["c"], dict(knobs) if knobs.get("whole") else None)


def _run(tree, f, knobs):
    try:
        return remembered(tree, knobs, f)
    except AxonError as exc:
        return ("error", str(exc))


def test_same_read_knobs_reuse_the_result_and_others_run_again():
    tree, f = {}, _Counted()
    assert _run(tree, f, {"a": 1, "b": 5, "c": 0}) == ("b", 5)
    assert _run(tree, f, {"a": 1, "b": 5, "c": 9}) == ("b", 5) and f.runs == 1  # c is not read when a == 1
    assert _run(tree, f, {"a": 1, "b": 6, "c": 0}) == ("b", 6) and f.runs == 2
    assert _run(tree, f, {"a": 1, "c": 0}) == ("b", "none") and f.runs == 3  # b missing is a value of its own
    assert _run(tree, f, {"a": True, "b": 5}) == ("b", 5) and f.runs == 4  # True == 1, but not the same knob value
    assert _run(tree, f, {"a": 2, "c": 3}) == ("error", "a=2 with c=3")
    assert _run(tree, f, {"a": 2, "c": 3, "b": 1}) == ("error", "a=2 with c=3") and f.runs == 5  # errors too
    assert _run(tree, f, {"a": 2, "c": 4}) == ("error", "a=2 with c=4") and f.runs == 6


def test_a_run_that_reads_every_knob_is_not_remembered():
    tree, f = {}, _Counted()
    assert _run(tree, f, {"a": 0, "c": 1, "whole": True}) == ("c", 1, {"a": 0, "c": 1, "whole": True})
    assert _run(tree, f, {"a": 0, "c": 1, "whole": True, "x": 2}) == ("c", 1, {"a": 0, "c": 1, "whole": True, "x": 2})
    assert f.runs == 2


def _outcome(graph, point):
    try:
        prog = lower(graph, point, HW)
    except AxonError as exc:
        return (type(exc).__name__, str(exc)), None
    return emit(prog), prog


@pytest.mark.parametrize("name", ["attention", "rmsnorm_matmul", "layernorm_matmul", "softmax"])
def test_lowering_with_remembered_passes_is_lowering_afresh(name, monkeypatch):
    """Default shapes, where some points only fit SBUF on `lower`'s retries (other reuse policies)."""
    graph = get(name).graph("default")
    knobs = Space(graph, HW).knobs
    rng = random.Random(0)
    points = []
    for _ in range(10):  # random points, each followed by three one-knob mutations (what the sampler asks)
        p = {k.name: rng.choice(k.choices) for k in knobs}
        points.append(p)
        for _ in range(3):
            k = rng.choice(knobs)
            points.append({**p, k.name: rng.choice(k.choices)})
    reused, seen = 0, {}
    for p in points:
        got, prog = _outcome(graph, p)
        with monkeypatch.context() as m:  # every pass lowered afresh, on a new graph
            m.setattr(lowering, "_lower_pass", lowering._lower_pass_now)
            fresh, fresh_prog = _outcome(get(name).graph("default"), p)
        assert got == fresh and prog == fresh_prog, p
        if prog is not None:
            reused += any(id(s) in seen for s in prog.body)
            seen.update({id(s): s for s in prog.body})  # kept alive: their ids stay theirs
    if name != "softmax":  # several passes: mutations find passes lowered before
        assert reused > 0


def test_online_attention_points_that_differ_in_a_knob_the_nest_ignores_share_its_statements():
    graph = get("attention").graph("small")
    point = {k.name: k.choices[0] for k in Space(graph, HW).knobs} | {"fusion": "fused", "softmax": "online"}
    a = lower(graph, point, HW)
    b = lower(graph, {**point, "tile_n": 128}, HW)  # a matmul knob of the row-block lowering
    assert b.body is a.body and b.header != a.header
    assert emit(b) == emit(lower(get("attention").graph("small"), {**point, "tile_n": 128}, HW))
