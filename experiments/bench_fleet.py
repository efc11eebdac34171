"""Wall time of one 6-task x 24-trial sweep (simulator backend, small presets) with 1, 2 and 3
local `axon worker` processes sharing it (bar: speedup with 2 workers >= 1.6x on 2 cores).

Each run starts from a fresh working directory (nothing reused between runs), the workers share
its SQLite records store (which holds the sweep's queue), Optuna journal and MLflow store, as
`axon sweep CONFIG --workers N` does. The time runs from publishing the sweep to the last worker's
exit (the summary and cost-model retrain included). The machine's load is printed: other users of
the CPU slow the parallel runs most.
Last line: sweep_1w_s=.. sweep_2w_s=.. sweep_3w_s=.. speedup_2w=.. duplicates=N
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)
import yaml

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.measure.records import RecordDB  # noqa: E402
from axon.search.fleet import Fleet, publish  # noqa: E402
from axon.search.sweepconfig import load_sweep  # noqa: E402
from axon.workdir import Workdir  # noqa: E402

WORKLOADS = ("softmax", "rmsnorm", "layernorm", "rmsnorm_matmul", "matmul", "swiglu")


def sweep_once(config: Path, workers: int) -> tuple[float, int]:
    """Seconds for the sweep with `workers` processes, and how many kernels were measured twice."""
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        sweep = publish(load_sweep(config), Fleet(Workdir.resolve(work)))
        command = [sys.executable, "-m", "axon.cli", "worker", "--workdir", work, "--sweep", sweep]
        procs = [
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)
        ]
        codes = [p.wait() for p in procs]
        elapsed = time.perf_counter() - start
        assert codes == [0] * workers, f"worker exit codes {codes}"
        db = RecordDB(Path(work) / "records.db")
        measured = collections.Counter(
            (r.kernel_hash, r.backend, r.hw_hash) for r in db.records() if "copied_from" not in r.measurement
        )
        return elapsed, sum(1 for n in measured.values() if n > 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench_fleet.yaml"
        data = {"name": "bench_fleet", "hw": ["trn1"], "backend": "sim", "sampler": "costmodel", "seed": 0}
        entries = [{"workload": w, "preset": "small"} for w in WORKLOADS]
        config.write_text(yaml.safe_dump({**data, "trials": args.trials, "entries": entries}))
        times, duplicates = {}, 0
        for n in args.workers:
            load = os.getloadavg()[0]
            times[n], twice = sweep_once(config, n)
            duplicates += twice
            print(f"{n} worker(s): {times[n]:.1f} s, {twice} kernels measured twice (load before {load:.2f})")
    figures = " ".join(f"sweep_{n}w_s={t:.1f}" for n, t in times.items())
    speedup = times[1] / times[2] if 1 in times and 2 in times else float("nan")
    print(f"load_1min={os.getloadavg()[0]:.2f} cpus={os.cpu_count()}")
    print(f"{figures} speedup_2w={speedup:.2f} duplicates={duplicates}")


if __name__ == "__main__":
    main()
