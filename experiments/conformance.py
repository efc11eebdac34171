"""Conformance of the NKI emulator on NKI kernels nobody here wrote (issue 24).

Runs every kernel of the corpora (default: the nki-samples tutorials and the seven measured trn1
kernels of NKIBench under ../shared/data) unmodified, at the shapes their callers use, against a
float64 reference written from the caller's math (or the corpus's NumPy reference), then traces it
at the same shape and simulates the trace. Writes experiments/results/conformance.md: kernel, API,
import ok, max relative error, emulate s, trace s, simulated us, and the exact error of every
failure. Last line: `kernels_ok=N/M wrong_silent=K` (wrong_silent: ran without error but the
numbers are wrong). Rows are cached under experiments/results/work/conformance/ by the content of
the kernel file and of axon/nki; `--fresh` ignores the cache.

The caller files' framework imports (torch, torch_xla, jax, ...) are not the kernels': where a
kernel file imports them at top level, the harness registers empty stand-ins for them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from corpus import (
    BF16,
    NKIBENCH,
    REPO,
    TUTORIALS,
    Case,
    f64,
    nkibench_cases,
    ref_attention_qkv_dh_s,
    ref_avgpool,
    ref_layernorm,
    ref_mamba,
    ref_matmul,
    ref_rmsnorm,
    ref_rotary,
    ref_sd_attention,
    ref_transpose2d,
    run_case,
    softmax_ref,
    uniform,
)

# the cases: every kernel of the tutorials at its caller's shape --------------------------------


def tutorial_cases() -> list[Case]:
    T = TUTORIALS
    cases = [
        Case(
            "tensor_add_tiled",
            T,
            "tensor_addition/tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda r: ([uniform(r, (256, 1024), BF16), uniform(r, (256, 1024), BF16)], {}),
            lambda a, b: f64(a)[0] + f64(b)[0],
            dtype=BF16,
        ),
        Case(
            "spmd_tensor_add",
            T,
            "tensor_addition/spmd_tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda r: ([uniform(r, (256, 1024), BF16), uniform(r, (256, 1024), BF16)], {}),
            lambda a, b: f64(a)[0] + f64(b)[0],
            dtype=BF16,
        ),
        Case(
            "spmd_multiple_nc_tensor_add",
            T,
            "tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
            "nki_tensor_add_nc2",
            lambda r: ([uniform(r, (512, 2048), BF16), uniform(r, (512, 2048), BF16)], {}),
            lambda a, b: f64(a)[0] + f64(b)[0],
            dtype=BF16,
        ),
        Case(
            "transpose2d",
            T,
            "transpose2d/transpose2d_nki_kernels.py",
            "tensor_transpose2D_kernel_",
            lambda r: ([np.arange(5 * 3 * 4, dtype=np.int8).reshape(5, 12), (3, 4)], {}),
            ref_transpose2d,
            dtype=np.int8,
        ),
        Case(
            "average_pool2d",
            T,
            "average_pool2d/average_pool2d_nki_kernels.py",
            "tensor_avgpool_kernel",
            lambda r: ([np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6), 2], {}),
            ref_avgpool,
        ),
        Case(
            "rmsnorm",
            T,
            "rmsnorm/rmsnorm_nki_kernels.py",
            "nki_rmsnorm_kernel",
            lambda r: ([uniform(r, (250, 512)), uniform(r, (512,))], {}),
            ref_rmsnorm,
        ),
        Case(
            "softmax",
            T,
            "softmax/softmax_nki_kernels.py",
            "nki_softmax_kernel",
            lambda r: ([np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]], np.float32)], {}),
            lambda a: softmax_ref(f64(a)[0], axis=1),
        ),
    ]
    for v in ("v1", "v2"):
        cases.append(
            Case(
                f"layernorm_{v}",
                T,
                "layernorm/layernorm_nki_kernel.py",
                f"nki_layernorm_kernel_{v}",
                lambda r: ([uniform(r, (4096, 8192)), 1e-5, uniform(r, (8192,)), uniform(r, (8192,))], {}),
                ref_layernorm,
            )
        )
    cases.append(
        Case(
            "matmul_basic",
            T,
            "matrix_multiplication/matrix_multiplication_nki_kernels.py",
            "nki_matmul_basic_",
            lambda r: ([uniform(r, (128, 64), BF16), uniform(r, (128, 512), BF16)], {}),
            ref_matmul,
            dtype=BF16,
        )
    )
    for fn in (
        "nki_matmul_tiled_",
        "nki_matmul_hoist_load_",
        "nki_matmul_block_free_dimension_",
        "nki_matmul_fully_optimized_",
    ):
        cases.append(
            Case(
                fn.strip("_").replace("nki_", ""),
                T,
                "matrix_multiplication/matrix_multiplication_nki_kernels.py",
                fn,
                lambda r: ([uniform(r, (1024, 4096), BF16), uniform(r, (1024, 2048), BF16)], {}),
                ref_matmul,
                dtype=BF16,
            )
        )
    for v in ("v1", "v2", "v3"):

        def mamba_in(r: np.random.Generator) -> tuple[list[Any], dict[str, Any]]:
            b, c, s, n = 1, 256, 512, 16  # mamba_torch.py
            return (
                [
                    uniform(r, (b, c, s), lo=0.0, hi=0.1),
                    uniform(r, (b, c, s)),
                    uniform(r, (c, n), lo=-1.0, hi=0.0),
                    uniform(r, (b, n, s)),
                    uniform(r, (b, n, s)),
                ],
                {},
            )

        cases.append(Case(f"mamba_{v}", T, "fused_mamba/mamba_nki_kernels.py", f"mamba_{v}", mamba_in, ref_mamba))
    cases.append(
        Case(
            "sd_attention",
            T,
            "sd_attention/sd_attention_nki_kernels.py",
            "fused_self_attn_for_SD_small_head_size",
            lambda r: ([uniform(r, (4096, 64)), uniform(r, (4096, 64)), uniform(r, (4096, 64))], {}),
            ref_sd_attention,
            dtype=BF16,
        )
    )  # mixed_precision=True by default: TensorE inputs in bf16
    for sl in (64, 128, 256):  # rotary_nki_kernels.py defaults: bs 2, heads 32, head_dim 128

        def rot_in(r: np.random.Generator, sl: int = sl) -> tuple[list[Any], dict[str, Any]]:
            bs, nh, hd = 2, 32, 128
            pos = np.arange(sl, dtype=np.float64)
            inv = 1.0 / (10000 ** (np.arange(0, hd, 2) / hd))
            emb = np.concatenate([np.outer(pos, inv)] * 2, axis=-1)
            cos = np.broadcast_to(np.cos(emb), (bs, sl, hd)).astype(np.float32)
            sin = np.broadcast_to(np.sin(emb), (bs, sl, hd)).astype(np.float32)
            return [
                r.standard_normal((bs, nh, sl, hd)).astype(np.float32),
                r.standard_normal((bs, nh, sl, hd)).astype(np.float32),
                cos,
                sin,
            ], {}

        cases.append(
            Case(
                f"rotary_sl{sl}",
                T,
                "rotary/rotary_nki_kernels.py",
                "nki_apply_rotary_embedding",
                rot_in,
                ref_rotary,
                grid=(2, 32),
            )
        )  # run_test launches it on the [bs, nh] grid
    for v in ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11"):
        seqlen = 128 if v in ("v1", "v2") else 4096  # test_attention.py accuracy mode: fp32, d_head 128
        # v7 on cast q, k, v and the softmax to bf16 inside the kernel: held to bf16 rounding
        bf16_inside = v not in ("v1", "v2", "v3", "v4", "v5", "v6")
        cases.append(
            Case(
                f"attention_{v}",
                T,
                "attention_fwd_performance/attention_kernels.py",
                f"attn_fwd_{v}",
                lambda r, s=seqlen: ([uniform(r, (128, s), lo=-1, hi=1) for _ in range(3)], {}),
                ref_attention_qkv_dh_s,
                dtype=BF16 if bf16_inside else np.float32,
            )
        )
    return cases


def _fingerprint(case: Case, data: Path) -> str:
    h = hashlib.sha256()
    h.update((data / case.corpus / case.file).read_bytes())
    for p in sorted((REPO / "axon" / "nki").glob("*.py")) + sorted((REPO / "axon" / "sim").glob("*.py")):
        h.update(p.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update((Path(__file__).parent / "corpus.py").read_bytes())
    h.update(case.name.encode())
    return h.hexdigest()[:16]


def all_cases(data: Path, corpora: list[str]) -> list[Case]:
    cases: list[Case] = []
    for c in corpora:
        if c == TUTORIALS:
            cases += tutorial_cases()
        elif c == NKIBENCH:
            cases += nkibench_cases(data / NKIBENCH)
        else:
            raise SystemExit(f"unknown corpus {c!r}; expected {TUTORIALS} or {NKIBENCH}")
    return cases


def write_report(rows: list[dict[str, Any]], out: Path) -> str:
    ok = sum(r["ok"] for r in rows)
    silent = sum(r["wrong_silent"] for r in rows)
    lines = [
        "# NKI emulator conformance",
        "",
        "Generated by `experiments/conformance.py`: each kernel unmodified, at its caller's shape, against a",
        "float64 reference (fp32: max relative error <= 1e-4 of the largest reference value; bf16: <= 8e-3),",
        "then traced at the same shape and simulated on trn1.",
        "",
        "| kernel | corpus | API | import ok | max rel err | emulate s | trace s | simulated us | result |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = "" if r["rel_err"] is None else f"{r['rel_err']:.2e}"
        fmt = lambda v: "" if v is None else f"{v}"  # noqa: E731
        lines.append(
            f"| {r['kernel']} | {r['corpus']} | {r['api']} | {'yes' if r['import_ok'] else 'no'} | {err} | "
            f"{fmt(r['emulate_s'])} | {fmt(r['trace_s'])} | {fmt(r['sim_us'])} | "
            f"{'ok' if r['ok'] else 'FAIL'} |"
        )
    fails = [r for r in rows if not r["ok"]]
    if fails:
        lines += ["", "## Failures", ""]
        for r in fails:
            lines.append(f"- **{r['kernel']}** (`{r['file']}:{r['fn']}`): {r['error']}")
    last = f"kernels_ok={ok}/{len(rows)} wrong_silent={silent}"
    lines += ["", last, ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    return last


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="*", default=[TUTORIALS, NKIBENCH], help="corpus folders under --data")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="folder holding the corpora")
    ap.add_argument("--only", default="", help="comma-separated kernel names to run")
    ap.add_argument("--fresh", action="store_true", help="ignore cached rows")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "conformance.md"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    if not data.is_dir():
        raise SystemExit(f"corpus folder {data} not found (--data)")
    cases = all_cases(data, args.corpus)
    only = {s for s in args.only.split(",") if s}
    work = REPO / "experiments" / "results" / "work" / "conformance"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in cases:
        cache = work / f"{case.corpus}__{case.name}.json"
        key = _fingerprint(case, data)
        if only and case.name not in only:
            if cache.exists():
                rows.append(json.loads(cache.read_text())["row"])
            continue
        if not args.fresh and cache.exists():
            saved = json.loads(cache.read_text())
            if saved["key"] == key:
                rows.append(saved["row"])
                continue
        t0 = time.perf_counter()
        row = run_case(case, data)
        cache.write_text(json.dumps({"key": key, "row": row}, default=float))
        rows.append(row)
        status = "ok" if row["ok"] else f"FAIL {row['error'][:300]}"
        print(f"{case.name}: {status} ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(write_report(rows, Path(args.out)))


if __name__ == "__main__":
    main()
