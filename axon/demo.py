"""`make demo`: the main job on the embedded defaults, end to end as far as Axon goes today.

It lists the workload library, traces rmsnorm_matmul and checks its graph against the float64
reference, and runs each later stage (variants, lowering, emulation, simulation) when present.
"""

from __future__ import annotations

import importlib.util
import sys
import time

from axon.cli import main as axon_main


def _step(title: str, *argv: str) -> None:
    print(f"\n$ axon {' '.join(argv)}    # {title}", flush=True)
    start = time.perf_counter()
    try:
        axon_main(list(argv))
    except SystemExit as exc:
        if exc.code not in (0, None):
            print(f"demo: step failed with exit code {exc.code}", file=sys.stderr)
            raise
    print(f"({time.perf_counter() - start:.1f} s)", flush=True)


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def main() -> None:
    _step("the 20 built-in workloads", "workloads")
    _step("the traced graph", "show", "rmsnorm_matmul")
    _step("evaluate the graph at the small preset", "check", "rmsnorm_matmul")
    if _have("axon.synth.cli"):
        _step("verified algebraic variants", "variants", "rmsnorm_matmul")
    print("\ndemo: done")


if __name__ == "__main__":
    main()
