"""LoweredProblem's search space: one-step neighbourhoods and roofline-relative features."""

from __future__ import annotations

import numpy as np

from axon.search.api import verified_variants
from axon.search.features import program_features
from axon.search.problem import LoweredProblem
from axon.target import load_hw
from axon.workloads import get


def _problem(name: str, workers: int = 1, **dims) -> LoweredProblem:
    graph = get(name).graph("small", **dims)
    return LoweredProblem(name, graph, load_hw("trn1"), verified_variants(graph), "float32", workers=workers)


def test_neighbours_are_every_one_knob_move_and_every_other_variant():
    problem = _problem("rmsnorm_matmul")
    point = problem.default_point()
    index, knobs = problem._split(point)
    neighbours = problem.neighbours(point)
    keys = {tuple(sorted((k, str(v)) for k, v in p.items())) for p in neighbours}
    assert len(keys) == len(neighbours)  # no duplicates
    same_variant = [p for p in neighbours if p["variant"] == index]
    for p in same_variant:  # exactly one knob of the variant changed
        changed = [k for k in knobs if p[k] != knobs[k]]
        assert len(changed) == 1
    expected = sum(len(k.choices) - 1 for k in problem.spaces[index].knobs)
    assert len(same_variant) == expected
    assert sorted({p["variant"] for p in neighbours if p["variant"] != index}) == [
        i for i in range(len(problem.variants)) if i != index
    ]


def test_roofline_relative_features_do_not_depend_on_the_shape_alone():
    """The same kernel structure at twice the rows is at the same distance from its roofline."""
    small, large = _problem("softmax", M=256), _problem("softmax", M=512)
    f_small, f_large = small.features(small.default_point()), large.features(large.default_point())
    assert f_large["bound_log"] > f_small["bound_log"]  # absolute estimates grow with the shape
    assert abs(f_large["bound_over_roof"] - f_small["bound_over_roof"]) < 0.1


def test_single_buffered_loads_do_not_overlap_in_the_prior():
    """With one buffer per loaded tile the next load waits for the last reader of this one, so the
    prior adds DMA to the busiest engine; with rotating buffers it is the overlapped bound."""
    problem = _problem("layernorm_matmul")
    point = {**problem.default_point(), "psum_bufs": 2}
    one = problem.features({**point, "bufs": 1})
    two = problem.features({**point, "bufs": 2})
    assert two["overlap_bound_log"] == two["bound_log"]
    assert one["overlap_bound_log"] > one["bound_log"]
    assert one["overlap_bound_log"] > two["overlap_bound_log"]


def test_one_psum_buffer_serializes_matmuls_and_evacuation_in_the_prior():
    """With one PSUM accumulator per row tile TensorE waits for each evacuation (rmsnorm_matmul at
    M=4096, K=2048, N=1024 on the simulator: 996 us with two, 1,114 us with one); the prior adds the
    evacuating engines' PSUM time to TensorE's, which the plain bound cannot see."""
    problem = _problem("rmsnorm_matmul", M=4096, K=2048, N=1024)
    point = {**problem.default_point(), "bufs": 2, "weights": "resident", "tile_n": 128}
    one = problem.features({**point, "psum_bufs": 1})
    two = problem.features({**point, "psum_bufs": 2})
    assert one["bound_log"] == two["bound_log"]
    assert two["overlap_bound_log"] == two["bound_log"]
    assert one["overlap_bound_log"] > two["overlap_bound_log"]


def test_features_with_costs_kept_across_points_are_those_computed_afresh():
    problem = _problem("attention")
    rng = np.random.default_rng(0)
    points = []
    for _ in range(15):  # random points and their one-knob mutations, as the sampler asks
        p = problem.sample(rng)
        points += [p] + [problem.mutate(p, rng) for _ in range(3)]
    shared = 0
    for p in points:
        prog = problem.program(p)
        if isinstance(prog, str):
            continue
        afresh = program_features(prog, problem.hw, problem._flops, problem._min_bytes, problem.roofline_ns)
        afresh["variant_moves"] = float(len(problem.variants[int(p["variant"])].moves))
        before = len(problem._costs)
        assert problem.features(p) == afresh
        shared += len(problem._costs) == before  # every instruction's cost was kept from earlier points
    assert shared > 0


def test_points_lowered_ahead_by_a_forked_child_validate_and_feature_as_one_process_does():
    """`prepare_async` lowers points in a forked child while this process goes on; `prepare` keeps what
    it sent and lowers the rest here, from the last point back; every verdict and feature is then the
    one a single process computes."""
    one, two = _problem("rmsnorm_matmul"), _problem("rmsnorm_matmul", workers=2)
    rng = np.random.default_rng(3)
    later = [one.sample(rng) for _ in range(60)]
    two.prepare_async(later)
    two.prepare([])
    assert two.prefetch.kept and len(two._lowered_here) < 60  # both processes lowered some
    for p in later:
        assert two.validate(p) == one.validate(p)
        assert two.features(p) == one.features(p)
    assert any(one.validate(p) is not None for p in later) and any(one.validate(p) is None for p in later)


def test_a_discovery_cut_by_its_time_budget_is_said_not_the_variant_cap(monkeypatch):
    # a 30-op spec's tune sat 45 s without a word, then tuned the variants proved by then as if all
    import axon.search.variants as search_variants

    graph = get("softmax").graph("small")
    capped: list[str] = []
    verified_variants(graph, max_variants=2, stopped=capped)
    assert capped == []  # the 24-variant cap is tune's choice, not a cut
    stopped: list[str] = []
    kept = verified_variants(graph, stopped=stopped, budget_s=0.0)
    assert len(kept) == 1 and len(stopped) == 1 and "stopped at the 0 s budget" in stopped[0]
    # not cut, but long (a 30-op spec: 36 s, 7 proofs to their timeout before the 24-variant cap)
    monkeypatch.setattr(search_variants, "SLOW_DISCOVERY_S", 0.0)
    slow: list[str] = []
    verified_variants(graph, stopped=slow)
    assert len(slow) == 1 and slow[0].startswith("variant discovery took") and "stopped at" not in slow[0]
