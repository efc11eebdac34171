"""Accuracy and speed of the sim backend's loop extrapolation against whole simulation.

`SimBackend` times a large kernel from two partial traces (top-level loops cut to 1/16 and 2/16 of
their iterations) instead of tracing and simulating every instruction. This script measures random
valid points of several workloads at their default shapes both ways. Last line:
`extrap_max_abs_err=X extrap_median_abs_err=Y median_speedup=Z points=N`

    .venv/bin/python experiments/bench_extrapolation.py [--points 4]
"""

from __future__ import annotations

import argparse
import os
import statistics

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from axon.measure.backend import SimBackend  # noqa: E402
from axon.search.api import verified_variants  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import get  # noqa: E402

WORKLOADS = ("rmsnorm_matmul", "softmax", "layernorm_matmul", "swiglu", "attention")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=4, help="random valid points per workload")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    hw = load_hw("trn1")
    fast, whole = SimBackend(), SimBackend(extrapolate=False)
    errs, speedups = [], []
    for name in args.workloads.split(","):
        graph = get(name).graph("default")
        problem = LoweredProblem(name, graph, hw, verified_variants(graph), "float32")
        rng = np.random.default_rng(0)
        done = 0
        while done < args.points:
            point = problem.sample(rng)
            if problem.validate(point) is not None:
                continue
            cand = problem.build(point)
            mf = fast.measure(cand.source, cand.kernel, cand.inputs, hw)
            mw = whole.measure(cand.source, cand.kernel, cand.inputs, hw)
            if mf.status != "ok" or mw.status != "ok":
                continue
            done += 1
            err = mf.latency_ns / mw.latency_ns - 1
            errs.append(abs(err))
            speedups.append(mw.wall_s / max(mf.wall_s, 1e-9))
            print(
                f"{name}: whole {mw.latency_ns / 1e3:,.1f} us in {mw.wall_s:.1f} s, "
                f"extrapolated {mf.latency_ns / 1e3:,.1f} us "
                f"in {mf.wall_s:.1f} s ({mf.details.get('timing')}), error {err:+.4%}",
                flush=True,
            )
    print(
        f"extrap_max_abs_err={max(errs):.4f} extrap_median_abs_err={statistics.median(errs):.4f} "
        f"median_speedup={statistics.median(speedups):.1f} points={len(errs)}"
    )


if __name__ == "__main__":
    main()
