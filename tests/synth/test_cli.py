"""`axon variants`: prints variants, moves and proof status; a bad workload is one line and exit 2."""

import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "axon.cli", "variants", *args], capture_output=True, text=True, timeout=120)


def test_variants_prints_moves_and_proof_status():
    from axon.workloads import all_workloads

    name = next(w.name for w in all_workloads() if any(n.op == "reduce" for n in w.symbolic().nodes)
                and any(n.op == "matmul" for n in w.symbolic().nodes))
    out = _run(name, "--depth", "2", "--timeout", "2")
    assert out.returncode == 0, out.stderr
    assert "== variant 0" in out.stdout and "proved by" in out.stdout and "variants; steps proved" in out.stdout


def test_unknown_workload_is_one_line_and_exit_2():
    out = _run("no_such_workload")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("axon: error:") and len(out.stderr.strip().splitlines()) == 1
