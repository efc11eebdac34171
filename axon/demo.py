"""`make demo`: the main job on the embedded defaults, end to end.

It lists the workload library, shows the verified variants of rmsnorm_matmul, then runs the small
demo sweep (two workloads tuned on the built-in trn1 simulator, tracked in ./.axon/mlflow.db) and
says where to look. Every step is an ordinary `axon` command, printed before it runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from axon.cli import main as axon_main

REPO = Path(__file__).resolve().parents[1]


def _step(title: str, *argv: str) -> None:
    print(f"\n$ axon {' '.join(argv)}    # {title}", flush=True)
    start = time.perf_counter()
    try:
        axon_main(list(argv))
    except SystemExit as exc:
        if exc.code not in (0, None):
            print(f"demo: `axon {' '.join(argv)}` failed with exit code {exc.code}", file=sys.stderr)
            raise
    print(f"({time.perf_counter() - start:.1f} s)", flush=True)


def main() -> None:
    workdir = ".axon"
    _step("the 20 built-in workloads", "workloads")
    _step("verified algebraic variants of one workload", "variants", "rmsnorm_matmul")
    _step(
        "tune two workloads on the trn1 simulator, tracked in MLflow",
        "sweep",
        str(REPO / "configs" / "sweeps" / "demo.yaml"),
        "--workdir",
        workdir,
    )
    _step("the runs just recorded", "runs", "--workdir", workdir, "-n", "5")
    print(
        f"\ndemo: done. Kernels: {workdir}/kernels/   records: {workdir}/records.db   "
        f"MLflow: `axon ui --workdir {workdir}` then open the printed URL"
    )


if __name__ == "__main__":
    main()
