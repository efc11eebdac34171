"""Speed of the NKI emulator (issue 3): trace a bf16 4096^3 tiled matmul (8,192 nc_matmul with
128x128 stationary and 512-wide moving tiles, plus its loads, PSUM evacuations and stores) and
execute the same kernel with numbers at 1024^3. Best of `--repeat` runs (the machine is shared).

Last line: `trace_s=... exec_s=...`. Results also go to experiments/results/bench_nki.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)
import ml_dtypes
import numpy as np

import axon.nki

axon.nki.install_import_shim()

import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


@nki.jit
def matmul_tiled(a_t, b):
    """C[M, N] = a_t[K, M].T @ b[K, N], tiles 128 (K) x 128 (M) x 512 (N), K accumulated in PSUM."""
    K, M = a_t.shape
    _, N = b.shape
    c = nl.ndarray((M, N), dtype=a_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                at = nl.ndarray((128, 128), dtype=a_t.dtype, buffer=nl.sbuf)
                bt = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=at, src=a_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(dst=bt, src=b[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                nisa.nc_matmul(acc, at, bt, accumulate=k > 0)
            ct = nl.ndarray((128, 512), dtype=a_t.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=ct, src=acc)
            nisa.dma_copy(dst=c[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=ct)
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bf16 = ml_dtypes.bfloat16

    trace_times, n_matmul, n_instr = [], 0, 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        tr = axon.nki.trace(matmul_tiled, ((4096, 4096), "bfloat16"), ((4096, 4096), "bfloat16"))
        trace_times.append(time.perf_counter() - t0)
        n_matmul, n_instr = tr.count()["nc_matmul"], len(tr)
        del tr
    assert n_matmul == 8192, n_matmul

    rng = np.random.default_rng(0)
    a_t = rng.standard_normal((1024, 1024)).astype(bf16)
    b = rng.standard_normal((1024, 1024)).astype(bf16)
    exec_times, err = [], 0.0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        c = axon.nki.run(matmul_tiled, a_t, b)
        exec_times.append(time.perf_counter() - t0)
    ref = a_t.astype(np.float64).T @ b.astype(np.float64)
    err = float(np.max(np.abs(c.astype(np.float64) - ref)) / np.max(np.abs(ref)))

    result = {
        "trace_s": min(trace_times),
        "exec_s": min(exec_times),
        "trace_instructions": n_instr,
        "trace_nc_matmul": n_matmul,
        "exec_rel_err": err,
        "trace_runs": trace_times,
        "exec_runs": exec_times,
    }
    out = Path(__file__).parent / "results" / "bench_nki.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"trace: {n_instr} instructions ({n_matmul} nc_matmul); exec 1024^3 bf16 rel err {err:.2e}")
    print(f"trace_s={result['trace_s']:.3f} exec_s={result['exec_s']:.3f}")


if __name__ == "__main__":
    main()
