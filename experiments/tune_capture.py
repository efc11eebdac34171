"""A capture of one whole tune, to show that a speed change left the tuner's decisions alone.

Runs `tune()` (seed 0, a fresh working directory, tracked as `axon tune` is) with recorders around
the lowering of each candidate in this process (`LoweredProblem._lower_key`, in order; not part of
the decisions, since with two workers a forked child lowers half of each pool),
each trial (`Tuner._trial`: number, status, latency, best so far, prediction, kernel hash, reason,
point) and each measurement (`SimBackend.measure`: source hash, status, latency and details, the
wall-clock fields left out), and hashes them with the best point, the baselines and the numerics
check; the artifacts of the run (kernel files, search trace, timeline PNG/JSON/summary, proofs with
their `time_s` blanked) are hashed file by file. Two runs of code that decides the same print the
same lines but the last (`wall=... cpu=...`).

    PYTHONPATH=. python experiments/tune_capture.py --workload attention --trials 24 --json /tmp/cap.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.measure.backend import SimBackend  # noqa: E402
from axon.search.api import TuneRequest, tune  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.search.tuner import Tuner  # noqa: E402

ARTIFACTS = ("search_trace.csv", "proofs.json", "summary.txt")


def _h(x: Any) -> str:
    return hashlib.sha256(json.dumps(x, default=str).encode()).hexdigest()[:16]


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (a tune's forked workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def capture(workload: str, trials: int, workers: int | None = None) -> dict[str, Any]:
    """Tune once with the recorders on; what they saw, and the run's artifacts, by hash."""
    lowered: list[str] = []
    logs: list[list[Any]] = []
    measures: list[list[Any]] = []
    lower_key, trial, measure = LoweredProblem._lower_key, Tuner._trial, SimBackend.measure

    def lower_rec(self: Any, key: str) -> Any:
        lowered.append(key)
        return lower_key(self, key)

    def trial_rec(self: Any, *a: Any, **k: Any) -> Any:
        log = trial(self, *a, **k)
        kh = log.record.kernel_hash if log.record else None
        point = json.dumps(log.point, sort_keys=True, default=str)
        logs.append([log.number, log.status, log.latency_ns, log.best_ns, log.predicted, kh, log.reason[:200], point])
        return log

    def measure_rec(self: Any, source: str, kernel: str, inputs: Any, hw: Any) -> Any:
        m = measure(self, source, kernel, inputs, hw)
        fields = {k: v for k, v in m.as_dict().items() if "time" not in k and not k.endswith("_s")}
        measures.append([hashlib.sha256(source.encode()).hexdigest()[:16], m.status, m.latency_ns, _h(fields)])
        return m

    LoweredProblem._lower_key, Tuner._trial, SimBackend.measure = lower_rec, trial_rec, measure_rec  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as work:
            start, cpu = time.perf_counter(), _cpu()
            report = tune(TuneRequest.make(workload, trials=trials, workdir=work, seed=0, workers=workers))
            wall, cpu_s = time.perf_counter() - start, _cpu() - cpu
            files = {}
            for p in sorted(Path(work).rglob("*")):
                if p.is_file() and ("timeline" in p.name or p.suffix == ".py" or p.name in ARTIFACTS):
                    data = p.read_bytes()
                    if p.name == "proofs.json":  # a proof's text says how long it took
                        data = re.sub(rb"time_s[=:] ?[-0-9.e]+", b"time_s=T", data)
                    name = re.sub(r"[0-9a-f]{32}", "RUN", str(p.relative_to(work)))  # the MLflow run id
                    files[name] = hashlib.sha256(data).hexdigest()[:16]
    finally:
        LoweredProblem._lower_key, Tuner._trial, SimBackend.measure = lower_key, trial, measure  # type: ignore[method-assign]
    best = [report.best_latency_ns, json.dumps(report.best_point, sort_keys=True, default=str)]
    return {
        "lowered": lowered,
        "trials": logs,
        "measures": measures,
        "best": [*best, report.unfused_ns, report.expert_ns],
        "numerics": str(report.numerics),
        "artifacts": files,
        "wall_s": wall,
        "cpu_s": cpu_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="attention")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--cpus", type=int, default=None, help="processes the tune may use (default: up to 2 CPUs)")
    ap.add_argument("--json", default=None, help="also write everything recorded to this file")
    args = ap.parse_args()
    got = capture(args.workload, args.trials, args.cpus)
    # the candidates lowered in this process: with two workers, half of each pool is lowered by a
    # forked child, so this list is not part of the decisions (the trials, measurements and result are)
    print("lowered here", len(got["lowered"]), _h(got["lowered"]))
    parts = ("trials", "measures")
    for k in parts:
        print(k, len(got[k]), _h(got[k]))
    print("best", got["best"])
    print("numerics", got["numerics"][:300])
    for name, digest in got["artifacts"].items():
        print("artifact", name, digest)
    decisions = _h([[len(got[k]), _h(got[k])] for k in parts] + [got["best"], got["numerics"]])
    print(f"decisions={decisions} artifacts={_h(got['artifacts'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(got, default=str))
    print(f"wall={got['wall_s']:.1f} cpu={got['cpu_s']:.1f}")


if __name__ == "__main__":
    main()
