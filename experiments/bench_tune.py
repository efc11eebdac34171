"""Tuning speed: trials per second of `axon tune` for rmsnorm_matmul and attention at their default
shapes (trn1, seed 0, 24 trials each), and the 200-trial rmsnorm_matmul bar (<= 600 s).

Each tune runs in a fresh process with a fresh working directory (nothing reused), tracked in MLflow
as a user's run would be; its time is the whole `tune()` call (variants, search, checks of the chosen
kernel, baselines, artifacts), with `axon tune`'s default processes (up to 2: `--cpus`, `axon.forked`).
`cpu_s` is the CPU time of the process and its forked helpers over the same span: this machine is
shared, so the wall time depends on the other jobs and the CPU time is the steadier figure.

    python experiments/bench_tune.py                       # both workloads, 24 trials
    python experiments/bench_tune.py --workload rmsnorm_matmul --trials 200   # the old bar

Last line, both workloads: `rmsnorm_matmul_trials_per_s=X attention_trials_per_s=Y`, then the same
per CPU second (`*_trials_per_cpu_s`), wall and CPU seconds (`*_s`, `*_cpu_s`) and the best kernel
(`*_best_us`) and the processes per tune (`cpus`); one workload: `tune_<trials>_s=X best_us=Y
measured=N trials_per_s=Z cpu_s=C trials_per_cpu_s=W`.

Before and after the trial-cost work of issue 26: experiments/results/bench_tune.txt (same machine,
both runs at once so that they share its load; the best kernels are the same, since the same seed and
code emit the same kernels and measure them to the same latency).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.forked import workers  # noqa: E402
from axon.search.api import TuneRequest, tune  # noqa: E402

WORKLOADS = ("rmsnorm_matmul", "attention")


def _cpu() -> float:
    """CPU seconds of this process and of its ended children (a tune's forked helpers, `axon.forked`)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def one(workload: str, trials: int, cpus: int | None) -> dict[str, float]:
    """Tune `workload` once in this process: wall s, CPU s, best us, measured trials."""
    with tempfile.TemporaryDirectory() as work:
        start, cpu = time.perf_counter(), _cpu()
        report = tune(TuneRequest.make(workload, trials=trials, workdir=work, seed=0, workers=cpus))
        elapsed, cpu_s = time.perf_counter() - start, _cpu() - cpu
    print(report.summary())
    return {"s": elapsed, "cpu_s": cpu_s, "best_us": report.best_latency_ns / 1e3, "measured": report.measured}


def _last_line(output: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in output.strip().splitlines()[-1].split())


def both(trials: int, cpus: int | None) -> str:
    """Each workload in its own process (so neither inherits the other's imports and caches)."""
    keys: dict[str, str] = {}
    for w in WORKLOADS:
        cmd = [sys.executable, __file__, "--workload", w, "--trials", str(trials)]
        cmd += ["--cpus", str(cpus)] if cpus else []
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        print(out.rstrip())
        got = _last_line(out)
        keys[f"{w}_trials_per_s"] = got["trials_per_s"]
        keys[f"{w}_s"] = got[f"tune_{trials}_s"]
        keys[f"{w}_cpu_s"] = got["cpu_s"]
        keys[f"{w}_trials_per_cpu_s"] = got["trials_per_cpu_s"]
        keys[f"{w}_best_us"] = got["best_us"]
    order = [f"{w}_{k}" for k in ("trials_per_s", "trials_per_cpu_s", "s", "cpu_s", "best_us") for w in WORKLOADS]
    return " ".join(f"{k}={keys[k]}" for k in order) + f" cpus={workers(cpus)}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=None, help="24 for both workloads, 200 for one")
    ap.add_argument("--workload", default=None, help="one workload (default: rmsnorm_matmul and attention)")
    ap.add_argument("--cpus", type=int, default=None, help="processes per tune (default: axon tune's, up to 2)")
    args = ap.parse_args()
    if args.workload is None:
        print(both(args.trials or 24, args.cpus))
        return
    trials = args.trials or 200
    r = one(args.workload, trials, args.cpus)
    print(
        f"tune_{trials}_s={r['s']:.1f} best_us={r['best_us']:.1f} measured={r['measured']} "
        f"trials_per_s={trials / r['s']:.3f} cpu_s={r['cpu_s']:.1f} trials_per_cpu_s={trials / r['cpu_s']:.3f}"
    )


if __name__ == "__main__":
    main()
