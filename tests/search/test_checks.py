"""The adversarial check of a chosen kernel, executed in the NKI emulator on inputs chosen to hurt.

A deliberately unsafe kernel (softmax without its max shift, proved equal over the reals) must fail
it and the kernel of the spec as written must pass, with the worst error per input class reported.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import axon.spec as ax
from axon.ir import trace
from axon.search.checks import FINITE_EDGE, AdversarialReport, ClassFigure, adversarial_check, numerics_check
from axon.search.problem import LoweredProblem
from axon.synth import discover_variants
from axon.target import load_hw
from axon.verify.adversarial import CLASSES
from axon.workloads import get


def _problem(name: str, moves: str, dtype: str = "float32") -> tuple[LoweredProblem, dict]:
    g = get(name).graph("small", dtype=dtype)
    variant = next(
        v
        for v in discover_variants(g, max_depth=1, exclude=frozenset({"split-tiles"}))
        if " + ".join(m.name for m in v.moves) == moves
    )
    problem = LoweredProblem(name, g, load_hw("trn1"), [variant], dtype)
    return problem, problem.default_point(0)


def test_an_unsafe_kernel_passes_the_uniform_check_and_fails_the_adversarial_one(tmp_path):
    problem, point = _problem("softmax", "unshift-exp")
    assert numerics_check(problem, point, directory=tmp_path).ok  # uniform [-1, 1] cannot see it
    report = adversarial_check(problem, point, kernel_dir=tmp_path)
    assert not report.ok
    assert not np.isfinite(report.worst()["offset"])
    assert "offset" in report.failure() and "float32" in report.failure()
    assert list(tmp_path.glob("kernel_*.py")), "the kernel file goes to the directory passed in"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_kernel_as_written_passes_with_a_figure_per_class(tmp_path, dtype):
    problem, point = _problem("softmax", "", dtype)
    report = adversarial_check(problem, point, kernel_dir=tmp_path)
    assert report.ok, report.failure()
    assert set(CLASSES) <= set(report.worst()) <= {*CLASSES, FINITE_EDGE}
    assert all(np.isfinite(e) for e in report.worst().values())
    assert max(report.worst().values()) <= (1e-5 if dtype == "float32" else 2e-2)


@pytest.mark.slow
def test_tune_reports_the_adversarial_figures_and_the_rejected_variants(tmp_path):
    from axon.search.api import TuneRequest, tune

    report = tune(TuneRequest.make("softmax", preset="small", trials=3, workdir=tmp_path, track=False))
    assert report.adversarial is not None and report.adversarial.ok
    assert set(CLASSES) <= set(report.adversarial.worst())
    assert "unshift-exp" not in report.moves
    assert any(r.startswith("unshift-exp: exp overflows") for r in report.fp_rejected)
    assert "adversarial:" in report.summary() and "not offered (floating point): unshift-exp" in report.summary()
    assert report.variant_id and report.variant_id[:8] in report.summary()


def test_summary_shows_the_spec_as_written_where_the_kernel_is_held_to_it():
    """A class where the spec as written is itself worse than the tolerance (so the kernel may be as
    bad): the figure reads as alarming unless the spec's own error stands beside it."""
    held = ClassFigure("magnitude", 1.0, 1.0, 10.0, "magnitude(all inputs)")
    fine = ClassFigure("typical", 2e-7, 1.8e-7, 1e-5, "typical")
    text = AdversarialReport({"M": 8}, "float32", {}, (fine, held)).summary()
    assert text == "typical 2.0e-07, magnitude 1.0e+00 (magnitude(all inputs): as written 1.0e+00)"


def test_an_ok_where_the_kernel_is_inf_as_the_spec_is_says_so():
    """Naive softmax, x declared in (-100, 100), float32: the kernel was NaN on every row of that range
    (exp(100) overflows, as the spec as written does) and the report said 'limit inf ... OK'."""
    held = ClassFigure("offset", math.inf, math.inf, math.inf, "offset(x)")
    fine = ClassFigure("typical", 2e-7, 1.8e-7, 1e-5, "typical")
    report = AdversarialReport({"M": 8}, "float32", {"x": (-100.0, 100.0)}, (fine, held))
    assert report.ok and report.verdict() == (
        "OK only as the spec as written: both give inf or NaN in float32 on the offset inputs of "
        "x in [-100, 100]: the spec as written is not finite there in float32 "
        "(an overflow, or an op outside its domain)"
    )
    assert AdversarialReport({"M": 8}, "float32", {}, (fine,)).verdict() == "OK"


def test_a_kernel_finite_where_the_spec_as_written_overflows_is_chosen_over_a_faster_one_that_is_not(tmp_path):
    """The same naive softmax tuned: its fastest kernel (as written) passed only as the spec as written
    does, inf on x near 100, while the max shift is finite there and was not even offered (the range
    analysis held its 2.5e-05 error bound against the 7.7e-07 of a spec that overflows on that box)."""
    from axon.search.api import TuneRequest, tune

    spec = tmp_path / "naive.py"
    spec.write_text(
        'import axon.spec as ax\n\n@ax.spec(x=ax.tensor("M N", range=(-100, 100)))\n'
        "def naive(x):\n    e = ax.exp(x)\n    return e / ax.sum(e, axis=-1)\n"
    )
    request = TuneRequest.make(f"{spec}:naive", shape={"M": 128, "N": 512}, trials=6, workdir=tmp_path, track=False)
    report = tune(request)
    assert "shift-exp" in report.moves and not [t for t in report.fp_rejected if t.startswith("shift-exp")]
    assert report.adversarial is not None and report.adversarial.verdict() == "OK", report.adversarial.verdict()
    assert any("(as written): OK only as the spec as written" in t for t in report.turned_down), report.turned_down


def _naive_sigmoid(tmp_path):
    """exp(x) / (1 + exp(x)) with x declared in [-200, 200]: inf / inf past x = 88.7 in float32."""
    spec = tmp_path / "naive.py"
    spec.write_text(
        'import axon.spec as ax\n\n@ax.spec(x=ax.tensor("M N", range=(-200, 200)))\n'
        "def naive(x):\n    e = ax.exp(x)\n    return e / (1.0 + e)\n"
    )
    return spec


def test_a_kernel_finite_but_wrong_where_the_spec_as_written_overflows_is_not_chosen(tmp_path):
    """A naive sigmoid, exp(x) / (1 + exp(x)) with x declared in [-200, 200]: its variant
    exp(x - log(1 + exp(x))) is finite past x = 88.7 but 0 there, where the answer is 1, and it was
    chosen, 'adversarial: ... offset 1.0e+00 (as written inf) OK', over the kernel that is the spec. The
    variant screen had the same allowance: now it is not offered, and the kernel check would turn it down."""
    from axon.search.api import TuneRequest, tune

    spec = _naive_sigmoid(tmp_path)
    request = TuneRequest.make(f"{spec}:naive", shape={"M": 128, "N": 256}, trials=6, workdir=tmp_path, track=False)
    report = tune(request)
    assert report.moves == () and report.adversarial is not None
    assert report.adversarial.verdict().startswith("OK only as the spec as written"), report.adversarial.verdict()
    wrong = [t for t in report.fp_rejected if t.startswith("fold-divisor-into-exp")]
    assert wrong and all("relative error 1 in float32" in t and "the spec as written inf" in t for t in wrong), wrong


def _unsafe_first(graph, depth=4, max_variants=24, rejected=None, stopped=None):
    """The softmax variants with the unsafe one (no max shift) first and unscreened, as a floating-point
    gate that missed it would leave them: its kernels are the fastest and fail the adversarial check."""
    found = discover_variants(graph, max_depth=1, exclude=frozenset({"split-tiles"}))
    by_moves = {" + ".join(m.name for m in v.moves): v for v in found}
    return [by_moves["unshift-exp"], by_moves[""]]


def test_a_fastest_kernel_that_fails_the_checks_gives_way_to_the_fastest_that_passes(tmp_path, monkeypatch):
    from axon.search import tuning
    from axon.search.api import TuneRequest, tune

    monkeypatch.setattr(tuning, "verified_variants", _unsafe_first)
    report = tune(TuneRequest.make("softmax", preset="small", trials=6, workdir=tmp_path, track=False))
    assert report.moves == () and report.adversarial is not None and report.adversarial.ok
    assert report.turned_down, "the unsafe kernels are the fastest measured: the checks turned at least one down"
    assert all("(unshift-exp): fails the adversarial numerics check" in t for t in report.turned_down)
    assert "turned down (checks): " in report.summary()
    assert report.kernel_path.endswith(".py") and "max" in open(report.kernel_path).read()


def test_a_finite_but_wrong_kernel_that_reached_the_kernel_check_is_turned_down(tmp_path, monkeypatch):
    """The naive sigmoid's exp(x - log(1 + exp(x))) given to the tuner unscreened, first (as a screen
    that missed it would): its kernel is 0 where the answer is 1 and the spec as written inf, and the
    kernel check turns it down (it allowed 10 x inf there)."""
    from axon.search import tuning
    from axon.search.api import TuneRequest, tune

    spec = _naive_sigmoid(tmp_path)

    def wrong_first(graph, *args, **kwargs):
        found = {" + ".join(m.name for m in v.moves): v for v in discover_variants(graph, max_depth=1)}
        return [found["fold-divisor-into-exp"], found[""]]

    monkeypatch.setattr(tuning, "verified_variants", wrong_first)
    report = tune(
        TuneRequest.make(f"{spec}:naive", shape={"M": 128, "N": 256}, trials=6, workdir=tmp_path, track=False)
    )
    assert report.moves == ()
    wrong = [t for t in report.turned_down if "fold-divisor-into-exp" in t]
    assert wrong and all("relative error 1 on" in t and "the spec as written inf" in t for t in wrong), wrong


def test_when_every_kernel_checked_fails_the_run_says_so_and_writes_none(tmp_path, monkeypatch):
    from axon.errors import AxonError
    from axon.search import tuning
    from axon.search.api import TuneRequest, tune

    monkeypatch.setattr(tuning, "verified_variants", lambda graph, *a, **k: _unsafe_first(graph)[:1])
    with pytest.raises(AxonError, match=r"the best kernel fails the adversarial numerics check: .*offset.*"):
        tune(TuneRequest.make("softmax", preset="small", trials=3, workdir=tmp_path, track=False))
    assert not list((tmp_path / "kernels").glob("*.py"))


SHARP_SOFTMAX = """
import axon.spec as ax


@ax.spec(x="M K", w="K N", b="N")
def sharp_softmax(x, w, b):
    c = x - ax.mean(x)
    s = (c @ w + b) / 0.5
    e = ax.exp(s - ax.max(s))
    return e / ax.sum(e)
"""


def test_a_bfloat16_kernel_as_accurate_as_the_spec_as_written_passes_the_uniform_check(tmp_path, monkeypatch):
    # sharp bfloat16 logits: the spec as written is itself 2.2e-2 off the float64 reference in bfloat16 on
    # uniform inputs, past the dtype's 2e-2; its own kernel was turned down, and every kernel of it
    import axon.nki
    from axon.search.checks import UNIFORM_SPEC_FACTOR
    from axon.workloads import load_spec

    (tmp_path / "sharp.py").write_text(SHARP_SOFTMAX)
    g = load_spec(f"{tmp_path / 'sharp.py'}:sharp_softmax").graph(None, "bfloat16", M=256, K=256, N=512)
    variant = discover_variants(g, max_depth=0)[0]
    problem = LoweredProblem("sharp_softmax", g, load_hw("trn1"), [variant], "bfloat16")
    point = problem.default_point(0)
    check = numerics_check(problem, point, directory=tmp_path)
    assert check.max_rel_err > 2e-2 and check.spec_error > 2e-2
    assert check.max_rel_err <= 1.1 * check.spec_error  # the kernel is as accurate as the spec as written
    assert check.ok and check.tolerance == pytest.approx(UNIFORM_SPEC_FACTOR * check.spec_error)
    assert "spec as written" in check.describe()

    real_run = axon.nki.run

    def off_by_a_tenth(*args, **kwargs):  # the same kernel with its output 10% off: still refused
        return real_run(*args, **kwargs) * np.float32(1.1)

    monkeypatch.setattr(axon.nki, "run", off_by_a_tenth)
    assert not numerics_check(problem, point, directory=tmp_path).ok


def test_a_float32_check_keeps_the_dtype_tolerance(tmp_path):
    problem, point = _problem("softmax", "")
    check = numerics_check(problem, point, directory=tmp_path)
    assert check.ok and check.tolerance == 1e-5 and check.spec_error < 5e-6
    assert check.describe() == "(tolerance 1e-05)"


def test_a_resumed_tune_says_how_many_trials_an_earlier_run_did(tmp_path):
    from axon.search.api import TuneRequest, tune

    def run(trials: int):
        return tune(TuneRequest.make("rmsnorm", preset="small", trials=trials, workdir=tmp_path, track=False, seed=3))

    first = run(2)
    assert first.resumed == 0 and "(resumed:" not in first.summary()
    again = run(2)  # the same command again: nothing left to do, and it says why
    assert (again.resumed, again.measured) == (2, 0)
    assert "0 measured / 0 reused / 0 failed trials" in again.summary()
    assert "(resumed: 2 trials done by an earlier run)" in again.summary()


TEMPERATURE_SOFTMAX = """
import axon.spec as ax


@ax.spec(x="M N")
def temperature_softmax(x):
    s = x / 0.7
    e = ax.exp(s - ax.max(s))
    return e / ax.sum(e)
"""


def test_a_kernel_that_overflows_where_the_spec_stays_finite_fails_the_finite_edge_class(tmp_path):
    # accurate in float32 to |x| ~ 16, finite far beyond: the kernel without the max shift passes every
    # class drawn from the accurate range and returns NaN at the edge of the finite one
    from axon.search.checks import FINITE_EDGE
    from axon.workloads import load_spec

    (tmp_path / "t.py").write_text(TEMPERATURE_SOFTMAX)
    g = load_spec(f"{tmp_path / 't.py'}:temperature_softmax").graph(None, M=128, N=256)
    by_moves = {" + ".join(m.name for m in v.moves): v for v in discover_variants(g, max_depth=1)}
    results = {}
    for moves in ("", "unshift-exp"):
        problem = LoweredProblem("t", g, load_hw("trn1"), [by_moves[moves]], "float32")
        results[moves] = adversarial_check(problem, problem.default_point(0), kernel_dir=tmp_path)
    unsafe = results["unshift-exp"]
    assert all(c.ok for c in unsafe.classes if c.cls != FINITE_EDGE)  # the accurate range cannot see it
    assert not unsafe.ok and FINITE_EDGE in unsafe.failure() and not np.isfinite(unsafe.worst()[FINITE_EDGE])
    assert results[""].ok and np.isfinite(results[""].worst()[FINITE_EDGE])


def test_a_kernel_wrong_only_past_its_first_tiles_fails_the_full_size_case(tmp_path, monkeypatch):
    # the classes run at reduced sizes (rmsnorm_matmul's default at 128^3: one tile of every loop); a
    # kernel that goes wrong only where its loops run more than once must still be caught
    import axon.nki
    from axon.search.api import verified_variants

    g = get("rmsnorm_matmul").graph("default")
    problem = LoweredProblem("rmsnorm_matmul", g, load_hw("trn1"), verified_variants(g), "float32")
    point = problem.default_point(0)
    assert adversarial_check(problem, point, kernel_dir=tmp_path).ok
    real_run = axon.nki.run

    def wrong_when_large(*args, **kwargs):
        out = real_run(*args, **kwargs)
        return out * np.float32(1.5) if out.shape[0] >= 1024 else out

    monkeypatch.setattr(axon.nki, "run", wrong_when_large)
    report = adversarial_check(problem, point, kernel_dir=tmp_path)
    assert not report.ok and report.dims == {"K": 128, "M": 128, "N": 128}
    assert "dominant(all inputs, at K=1024 M=1024 N=1024)" in report.failure()


@ax.spec(x="M N")
def fixed_halves(x):
    return x[:, 0:256] * x[:, 256:512]


def test_a_spec_sliced_at_fixed_columns_is_checked_where_its_slices_fit(tmp_path):
    # the checks cut every dimension to 128 above their FLOP budget, where x[:, 256:512] lies outside
    # the axis: the user's valid spec was refused with a slice error at sizes they never gave
    from axon.search.api import verified_variants
    from axon.verify.adversarial import input_ranges

    g = trace(fixed_halves, M=256, N=512)
    assert set(input_ranges(g, "float32")) == {"x"}
    problem = LoweredProblem("fixed_halves", g, load_hw("trn1"), verified_variants(g), "float32")
    report = adversarial_check(problem, problem.default_point(0), kernel_dir=tmp_path, max_flops=1.0)
    assert report.ok and report.dims["N"] == 512


def test_ctrl_c_while_the_best_kernel_is_checked_says_the_same_command_writes_it(tmp_path, monkeypatch):
    # after the last trial the checks can take most of a tune's wall time; a Ctrl-C there printed
    # "axon: interrupted" alone, where the README promises the best kernel so far or what to do
    from axon.search import tuning
    from axon.search.api import TuneInterrupted, TuneRequest, tune

    request = TuneRequest.make("rmsnorm", preset="small", trials=1, workdir=tmp_path, track=False)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(tuning, "numerics_check", ctrl_c)
        with pytest.raises(TuneInterrupted, match=r"interrupted while checking .* the same command resumes"):
            tune(request)
    assert not (tmp_path / "kernels").exists()
    with monkeypatch.context() as patched:  # once the kernel is written, while the baselines are measured
        patched.setattr(tuning, "keep_baselines", ctrl_c)
        with pytest.raises(TuneInterrupted, match=r"interrupted; best .* us, kernel: ") as stop:
            tune(request)
    assert stop.value.kernel_path and open(stop.value.kernel_path).read().startswith('"""Generated by axon')
    report = tune(request)
    assert (report.measured, report.resumed) == (0, 1) and report.kernel_path == stop.value.kernel_path


def test_ctrl_c_again_while_the_best_kernel_so_far_is_checked_says_what_is_kept(tmp_path, monkeypatch):
    # Ctrl-C twice (the first mid-search, the second while its best kernel so far was checked) printed
    # "axon: interrupted" alone: nothing said whether a kernel was written or what the same command does
    from axon.search import tuning
    from axon.search.api import TuneInterrupted, TuneRequest, tune

    request = TuneRequest.make("rmsnorm", preset="small", trials=2, workdir=tmp_path, track=False)
    search = tuning.Tuner.run

    def search_then_ctrl_c(self):
        search(self)
        raise KeyboardInterrupt

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(tuning.Tuner, "run", search_then_ctrl_c)
        patched.setattr(tuning, "numerics_check", ctrl_c)
        with pytest.raises(
            TuneInterrupted, match=r"interrupted again .* none was written; .* the same command resumes"
        ):
            tune(request)
    assert not (tmp_path / "kernels").exists()
    report = tune(request)
    assert report.measured == 0 and report.kernel_path


@ax.spec(x=ax.tensor("M N", range=(9990.0, 10010.0)))
def one_pass_variance(x):
    mu = ax.mean(x)
    return ax.mean(x * x) - mu * mu


def test_a_kernel_ok_only_because_the_spec_as_written_is_off_says_so(tmp_path):
    # E[x^2] - E[x]^2 near 1e4 cancels in float32: the spec as written is ~1e3 off the float64 answer,
    # so is a kernel that matches it, and the report read "OK" as for a kernel right to 1e-7
    g = trace(one_pass_variance, M=128, N=512)
    variant = discover_variants(g, max_depth=0)[0]
    problem = LoweredProblem("one_pass_variance", g, load_hw("trn1"), [variant], "float32")
    check = numerics_check(problem, problem.default_point(0), directory=tmp_path)
    assert check.ok and check.spec_error > 0.1 and check.dtype_tolerance == 1e-5
    assert check.verdict().startswith("OK only as the spec as written: the spec as written is itself")
    rms, point = _problem("rmsnorm", "")
    assert numerics_check(rms, point, directory=tmp_path).verdict() == "OK"


def test_a_bfloat16_kernel_is_checked_against_the_reference_on_the_inputs_it_is_given(tmp_path):
    # x * 2 is exact in bfloat16: its kernel's only error was the float64 reference taken on inputs the
    # kernel never saw (unrounded), 2e-3 of the 2e-2 it may have, which hid that much of its own error
    from axon.workloads import load_spec

    (tmp_path / "doubled.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef doubled(x):\n    return x * 2.0\n"
    )
    g = load_spec(f"{tmp_path / 'doubled.py'}:doubled").graph(None, "bfloat16", M=128, N=512)
    problem = LoweredProblem("doubled", g, load_hw("trn1"), discover_variants(g, max_depth=0)[:1], "bfloat16")
    check = numerics_check(problem, problem.default_point(0), directory=tmp_path)
    assert check.max_rel_err == 0.0 and check.spec_error == 0.0 and check.ok
