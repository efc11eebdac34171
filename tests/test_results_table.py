"""The pieces of experiments/results_table.py that decide its figures: the median and spread of the
seeds, Axon's predicted latency against the measured NKIBench kernels, the last line, and the
compiler and nki-samples cells (a missing corpus file is an error; a measured cell is cached)."""

import dataclasses
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from axon.measure.backend import SimBackend
from axon.measure.records import RecordDB
from axon.target import load_hw
from axon.workloads import get

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
try:
    import corpus
    import results_table
    import rivals
    import table_report as report
finally:
    sys.path.remove(str(REPO / "experiments"))

# a kernel of our own, in the tutorials' (legacy) API: out = 2 x
DOUBLE = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    tile = nl.load(x[i_p, i_f])
    nl.store(out[i_p, i_f], value=nl.multiply(tile, 2.0))
    return out
"""


def test_predicted_ms_scales_the_measured_kernel_by_the_simulated_ratio():
    # rope (issue 26): measured 4.33 ms, compiler simulated 3.13 ms, Axon simulated 6.80 ms
    assert report.predicted_ms(4.33, 6.80e6, 3.13e6) == pytest.approx(4.33 * 6.80 / 3.13)
    assert report.predicted_ms(2.0, 1e6, 1e6) == 2.0
    with pytest.raises(ValueError):
        report.predicted_ms(2.0, 1e6, 0.0)


def test_spread_is_median_min_max():
    assert report.spread([30.0, 10.0, 20.0]) == (20.0, 10.0, 30.0)
    assert report.spread([5.0]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        report.spread([])


def _seed(seed, axon, tuned, moves=(), tuning_s=10.0):
    return {
        "workload": "w",
        "kind": "single",
        "hw": "trn1",
        "seed": seed,
        "axon_ns": axon,
        "unfused_tuned_ns": tuned,
        "unfused_default_ns": 100.0,
        "moves": list(moves),
        "tuning_s": tuning_s,
    }


def test_combine_seeds_takes_the_median_and_keeps_the_spread():
    rows = [_seed(0, 30e3, 60e3, ["a"]), _seed(1, 10e3, 40e3, ["b"]), _seed(2, 20e3, 50e3, ["c"], 5.0)]
    row = report.combine_seeds(rows)
    assert (row["axon_ns"], row["axon_min"], row["axon_max"]) == (20e3, 10e3, 30e3)
    assert row["unfused_tuned_ns"] == 50e3
    assert row["moves"] == ["c"]  # the median seed's kernel
    assert row["tuning_s"] == 25.0
    assert report.seeds_cell(row) == "10.0-30.0 (3)"
    assert report.seeds_cell(report.combine_seeds(rows[:1])) == "1 seed"


def test_combine_seeds_leaves_out_a_failed_seed_and_says_so():
    failed = {"workload": "w", "kind": "single", "hw": "trn1", "seed": 2, "error": "AxonError: boom"}
    row = report.combine_seeds([_seed(0, 30.0, 60.0), _seed(1, 10.0, 40.0), failed])
    assert row["axon_ns"] == 20.0  # the median of the two that ran
    assert row["seed_errors"] == ["AxonError: boom"]
    only_failed = report.combine_seeds([failed])
    assert only_failed["error"] == "AxonError: boom" and "axon_ns" not in only_failed


def _bench_inputs():
    rows = [
        {
            "workload": "silu",
            "kind": "single",
            "hw": "trn1",
            "axon_ns": 1e6,
            "unfused_default_ns": 4e6,
            "unfused_tuned_ns": 3e6,
            "roofline_ns": 0.8e6,
            "compiler_task": "silu_T",
            "compiler": {"ns": 2e6},
        },
        {
            "workload": "softmax",
            "kind": "single",
            "hw": "trn1",
            "axon_ns": 2e6,
            "unfused_default_ns": 4e6,
            "unfused_tuned_ns": 3e6,
            "roofline_ns": 1e6,
            "expert_ns": 1.8e6,
            "nki_samples": {"ns": 3e6},
        },
        {"workload": "silu", "kind": "single", "hw": "trn2", "axon_ns": 1e6, "compiler_task": "silu_T"},
    ]
    own = [{"label": "attention S=512", "axon_ns": 40e3, "nki_samples": {"ns": 36e3}}]
    measured = {"silu_T": {"latency": 1.5}}
    best = {"silu_T": 0.5}
    return rows, own, measured, best


def test_nkibench_rows_predict_from_the_measured_kernel():
    rows, _, measured, best = _bench_inputs()
    (b,) = report.nkibench_rows(rows, measured, best)  # the trn2 row and the row without a compiler cell are not tasks
    assert b["task"] == "silu_T"
    assert b["predicted_ms"] == pytest.approx(1.5 * 1e6 / 2e6)
    assert b["vs_best_found"] == pytest.approx(0.5 / 0.75)
    assert b["compiler_sim_ms"] == 2.0 and b["axon_sim_ms"] == 1.0


def test_last_line_has_every_key_in_order():
    rows, own, measured, best = _bench_inputs()
    trn1 = [r for r in rows if r["hw"] == "trn1"]
    line = report.last_line(trn1, own, report.nkibench_rows(rows, measured, best), n_rows=20, n_tasks=7)
    pairs = dict(kv.split("=") for kv in line.split())
    assert list(pairs) == [
        "geomean_single_vs_default",
        "geomean_multi_vs_default",
        "geomean_multi_vs_unfused_tuned",
        "max_speedup",
        "ours_handwritten_min",
        "rmsnorm_matmul_vs_ours_handwritten",
        "roofline70",
        "geomean_vs_compiler",
        "min_vs_compiler",
        "vs_nki_samples_min",
        "vs_nki_samples_geomean",
        "predicted_vs_best_found_geomean",
        "beats_best_found",
    ]
    assert pairs["geomean_single_vs_default"] == f"{math.sqrt(4 * 2):.2f}"
    assert pairs["geomean_multi_vs_default"] == "nan"
    assert pairs["ours_handwritten_min"] == "0.90"
    assert pairs["roofline70"] == "1/20"  # silu at 80%, softmax at 50%
    assert pairs["geomean_vs_compiler"] == "2.00" and pairs["min_vs_compiler"] == "2.00"
    assert pairs["vs_nki_samples_min"] == "0.90"  # the tutorial's own shape counts (36 against 40 us)
    assert pairs["vs_nki_samples_geomean"] == f"{math.sqrt(1.5 * 0.9):.2f}"
    assert pairs["predicted_vs_best_found_geomean"] == "0.67"
    assert pairs["beats_best_found"] == "0/7"


def test_compiler_loader_refuses_a_missing_kernel_file(tmp_path):
    dims = {"M": 4096, "N": 7168}
    with pytest.raises(FileNotFoundError, match=r"silu_M4096_N7168.*not found"):
        rivals.compiler_rival("silu", dims, "float32", tmp_path)
    # no task at another shape or dtype, or for a workload without one: no cell, not an error
    assert rivals.compiler_rival("silu", {"M": 256, "N": 512}, "float32", tmp_path) is None
    assert rivals.compiler_rival("silu", dims, "bfloat16", tmp_path) is None
    assert rivals.compiler_rival("gelu", dims, "float32", tmp_path) is None


def _double_rival(data, launches=1):
    folder = data / corpus.TUTORIALS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "double.py").write_text(DOUBLE)
    case = corpus.Case(
        "double@M128xN512:float32",
        corpus.TUTORIALS,
        "double.py",
        "double",
        lambda r: ([corpus.uniform(r, (128, 512))], {}),
        lambda x: 2.0 * np.asarray(x, np.float64),
    )
    return rivals.Rival("nki-samples", (case,), launches=launches)


def test_a_cell_is_checked_timed_and_cached(tmp_path, monkeypatch):
    rival = _double_rival(tmp_path)
    cell = rivals.measure(rival, "trn1", tmp_path, tmp_path / "work")
    assert cell["ns"] > 0 and cell["version"] == "double@M128xN512:float32"
    assert cell["rel_err"] == 0.0
    calls = []
    monkeypatch.setattr(rivals, "check_numerics", lambda *a: calls.append(a) or {})
    monkeypatch.setattr(rivals, "_time_case", lambda *a: calls.append(a) or {})
    again = rivals.measure(rival, "trn1", tmp_path, tmp_path / "work")
    assert calls == [] and again["ns"] == cell["ns"]  # a re-run redoes nothing
    assert rivals.measure(rival, "trn1", tmp_path, tmp_path / "work", compute=False)["ns"] == cell["ns"]
    (tmp_path / corpus.TUTORIALS / "double.py").write_text(DOUBLE + "\n# edited\n")
    assert rivals.measure(rival, "trn1", tmp_path, tmp_path / "work", compute=False) is None  # a new kernel file


def test_a_wrong_kernel_has_no_latency(tmp_path):
    rival = _double_rival(tmp_path)
    case = dataclasses.replace(rival.cases[0], reference=lambda x: 3.0 * np.asarray(x, np.float64))
    wrong = rivals.Rival("nki-samples", (case,))
    cell = rivals.measure(wrong, "trn1", tmp_path, tmp_path / "work")
    assert cell["ns"] is None and "wrong result" in cell["versions"]["double@M128xN512:float32"]["error"]


def test_launches_count_one_launch_overhead(tmp_path):
    one = rivals.measure(_double_rival(tmp_path), "trn1", tmp_path, tmp_path / "work")["ns"]
    four = rivals.measure(_double_rival(tmp_path, launches=4), "trn1", tmp_path, tmp_path / "work")["ns"]
    assert four == pytest.approx(4 * one - 3 * load_hw("trn1").costs.launch_overhead_ns)


def test_version_labels():
    assert report.version_label("attention_v8@H16xS4096xD128:float32") == "v8"
    assert report.version_label("matmul_fully_optimized@M1xK1xN1:bfloat16") == "fully_optimized"
    assert report.version_label("silu_M4096_N7168") == "silu_M4096_N7168"
    assert report.version_label(None) == ""


def test_a_kernel_refusing_the_shape_says_why(tmp_path):
    rival = _double_rival(tmp_path)
    refusing = DOUBLE.replace("    out = nl.ndarray", "    assert x.shape[1] == 64\n    out = nl.ndarray")
    (tmp_path / corpus.TUTORIALS / "double.py").write_text(refusing)
    cell = rivals.measure(rival, "trn1", tmp_path, tmp_path / "work")
    assert cell["ns"] is None
    assert cell["versions"]["double@M128xN512:float32"]["error"].endswith(
        "raised AssertionError: assert x.shape[1] == 64"
    )


def test_a_row_tuned_again_gets_a_study_of_its_own(tmp_path):
    """A stale row must not resume its old study: that study holds the whole budget and would run no trial."""
    import optuna

    from axon.search.storage import journal_storage
    from axon.workdir import Workdir

    assert results_table.fresh_study(tmp_path, "table:softmax:trn1:0") == ("table:softmax:trn1:0", 0)
    storage = journal_storage(Workdir(tmp_path), None)
    for name in ("table:softmax:trn1:0", "table:softmax:trn1:0:1"):
        optuna.create_study(study_name=name, storage=storage)
    assert results_table.fresh_study(tmp_path, "table:softmax:trn1:0") == ("table:softmax:trn1:0:2", 2)
    assert results_table.fresh_study(tmp_path, "table:rope:trn1:0") == ("table:rope:trn1:0", 0)


def _measured_row(spot):
    """A row as `seed_row` writes it, for the default points of the row's two problems."""
    full, unfused = results_table.problems(spot, "trn1")
    out = {"kernels": {}, "points": {}}
    for which, problem, point in (
        ("axon", full, full.default_point(0)),
        ("unfused_tuned", unfused, unfused.default_point(0)),
        ("unfused_default", full, full.unfused_point(0)),
    ):
        cand = problem.build(point)
        out[f"{which}_ns"] = SimBackend().measure(cand.source, cand.kernel, cand.inputs, problem.hw).latency_ns
        if which != "unfused_default":
            out["kernels"][which], out["points"][which] = cand.kernel_hash, point
    return {**out, "expert_hash": results_table._expert_hash(spot.workload.name), "timing": "an older simulator"}


def test_a_row_outlives_a_simulator_change_only_if_its_kernels_time_the_same(tmp_path):
    """Rows are kept by the points they hold (no records database needed, so the row files alone
    carry a table to a new machine); a change of the simulator's code re-simulates the row's
    kernels, keeps the row when every latency is the same, and retires it when one moved."""
    spot = results_table.Spot(get("softmax"), {"M": 256, "N": 512}, label="softmax small")
    row = _measured_row(spot)
    assert results_table.row_current(dict(row), spot, "trn1", RecordDB(tmp_path / "none.db"))
    assert results_table.row_times_the_same(row, spot, "trn1")
    moved = {**row, "unfused_default_ns": row["unfused_default_ns"] * 1.001}
    assert not results_table.row_times_the_same(moved, spot, "trn1")
    other = {**row, "points": {**row["points"], "axon": {**row["points"]["axon"], "bufs": 2}}}
    assert not results_table.row_current(other, spot, "trn1", RecordDB(tmp_path / "none.db"))

    cache = tmp_path / "rows" / "softmax_small_trn1_24_0.json"
    cache.parent.mkdir()
    cache.write_text(results_table.json.dumps(row))
    kept = results_table.seed_row(spot, "trn1", 24, 0, tmp_path, cached_only=True)
    assert not kept.get("stale") and kept["timing"] == results_table.timing_key("trn1")
    cache.write_text(results_table.json.dumps(moved))
    assert results_table.seed_row(spot, "trn1", 24, 0, tmp_path, cached_only=True)["stale"]


def test_a_rival_cell_is_computed_in_a_child_whose_memory_goes_with_it():
    """`in_child` returns what the child computed, raises what it raised, and says so when it died."""
    assert rivals.in_child(lambda: {"pid": os.getpid()})["pid"] != os.getpid()
    with pytest.raises(ValueError, match="bad kernel"):
        rivals.in_child(lambda: (_ for _ in ()).throw(ValueError("bad kernel")))
    with pytest.raises(RuntimeError, match="died"):
        rivals.in_child(lambda: os._exit(9))
