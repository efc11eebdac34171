"""`axon variants`: prints variants, moves and proof status; a bad workload is one line and exit 2."""

import pytest

from tests.conftest import axon_in_process, run_axon


def _run(*args):
    return axon_in_process("variants", *args)


def test_variants_prints_moves_and_proof_status():
    from axon.workloads import all_workloads

    name = next(
        w.name
        for w in all_workloads()
        if any(n.op == "reduce" for n in w.symbolic().nodes) and any(n.op == "matmul" for n in w.symbolic().nodes)
    )
    out = _run(name, "--depth", "2", "--timeout", "2")
    assert out.returncode == 0, out.stderr
    assert "== variant 0" in out.stdout and "proved by" in out.stdout and "variants; steps proved" in out.stdout
    # at a depth other than tune's, the count tune offers is said to come from tune's own search
    # ("1 variants ... tune offers 6" at --depth 0 read as a contradiction)
    assert "(from its own search, to depth 4)" in out.stdout.splitlines()[-1]


def test_unknown_workload_is_one_line_and_exit_2():
    out = run_axon("variants", "no_such_workload")  # in a new process, as a user runs it
    assert out.returncode == 2
    assert out.stderr.strip().startswith("axon: error:") and len(out.stderr.strip().splitlines()) == 1


def test_variants_lists_floating_point_rejections_with_their_reason():
    out = _run("softmax", "--depth", "2", "--preset", "small")
    assert out.returncode == 0, out.stderr
    assert "# rejected for floating point in float32" in out.stdout
    assert "unshift-exp: exp overflows for arguments > 88.7 in float32" in out.stdout
    assert "[not tuned: uses split-tiles, which tune excludes]" in out.stdout


def test_variants_says_what_it_waits_for_and_when_its_budget_cut_the_search(monkeypatch):
    # a 30-op spec listed nothing for 105 s (the 50 s budget twice), then a list cut at the budget
    # that looked complete
    import functools
    import sys

    import axon.cli  # noqa: F401  (axon.cli.variants is the command there; the module is in sys.modules)
    from axon.synth import discover

    cli_variants = sys.modules["axon.cli.variants"]
    monkeypatch.setattr(cli_variants, "discover", functools.partial(discover, budget_s=0.0))
    out = _run("softmax", "--depth", "2", "--preset", "small")
    assert out.returncode == 0, out.stderr
    assert "proving the variants of softmax" in out.stderr and "up to 50 s" in out.stderr
    assert "(stopped at the 0 s budget, with proposals at depth 1 untried: more variants may exist)" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_variants_numbers_a_variant_as_tune_reports_it(tmp_path, dtype):
    import re

    from axon.search.api import TuneRequest, tune

    report = tune(
        TuneRequest.make(
            "rmsnorm_matmul", preset="small", dtype=dtype, trials=4, workdir=tmp_path, track=False, check=False
        )
    )
    out = _run("rmsnorm_matmul", "--preset", "small", "--dtype", dtype)
    assert out.returncode == 0, out.stderr
    listed = re.findall(r"^== variant (\S+)  id (\w+)", out.stdout, re.M)
    by_id = {h: n for n, h in listed}
    chosen = str(report.best_point["variant"])
    assert by_id[report.variant_id[:8]] == chosen
    assert f"variant {chosen} (" in report.best_description and report.variant_id[:8] in report.summary()
    # every variant tune offers has one number, 0.. without gaps, as in tune's search space
    numbers = sorted(int(n) for n, _ in listed if n != "-")
    assert numbers == list(range(len(numbers)))
