"""Speed of the timing simulator: a synthetic 100,000-instruction trace, and trace + simulate of the
bf16 4096^3 tiled matmul (8,192 nc_matmul). Last line: `sim_100k_s=... matmul_trace_sim_s=...`
(bars: 2 s and 4 s). Usage: .venv/bin/python experiments/bench_sim.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "kernels"))


def best_of(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    from axon.sim import simulate
    from axon.sim.synthetic import pipelined_trace
    from axon.target import load_hw

    hw = load_hw("trn1")
    trace = pipelined_trace(100_000)
    sim_s = best_of(lambda: simulate(trace, hw))
    print(f"synthetic trace: {len(trace)} instructions, simulated in {sim_s:.3f} s")

    import axon.nki

    axon.nki.install_import_shim()  # the kernel files `import nki` as on a Trainium host
    import matmul

    specs = [((4096, 4096), "bfloat16"), ((4096, 4096), "bfloat16")]
    out = {}

    def trace_and_simulate():
        tr = axon.nki.trace(matmul.matmul_v1, *specs, hw=hw)
        out["timing"] = simulate(tr, hw)
        out["n"] = len(tr)

    mm_s = best_of(trace_and_simulate, repeats=2)
    t = out["timing"]
    print(
        f"matmul 4096^3 bf16 (v1 kernel, loads in the K loop): {out['n']} instructions, "
        f"{t.instructions['tensor']} nc_matmul, "
        f"simulated latency {t.latency_ns / 1e6:.3f} ms; trace + simulate {mm_s:.3f} s"
    )
    print(f"sim_100k_s={sim_s:.3f} matmul_trace_sim_s={mm_s:.3f}")


if __name__ == "__main__":
    main()
