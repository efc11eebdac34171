"""How long `axon tune rmsnorm_matmul` takes at its default shape with 200 trials (bar: <= 600 s).

A fresh working directory each run (nothing reused), tracked in MLflow as a user's run would be.
Last line: tune_200_s=X best_us=Y measured=N
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.search.api import TuneRequest, tune  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--workload", default="rmsnorm_matmul")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        report = tune(TuneRequest.make(args.workload, trials=args.trials, workdir=work, seed=0))
        elapsed = time.perf_counter() - start
    print(report.summary())
    print(f"tune_{args.trials}_s={elapsed:.1f} best_us={report.best_latency_ns / 1e3:.1f} measured={report.measured}")


if __name__ == "__main__":
    main()
