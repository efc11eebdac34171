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
import importlib.util
import json
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import axon.nki  # noqa: E402
from axon.errors import AxonError  # noqa: E402

TUTORIALS = "nki-samples-tutorials"
NKIBENCH = "nkibench-trn1"
REL_TOL = 1e-4  # fp32 kernels; bf16 kernels are held to bf16 rounding (see `tolerance`)
BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass
class Case:
    """One kernel at one caller shape: inputs (arrays and compile-time arguments) and reference."""

    name: str
    corpus: str
    file: str  # relative to the corpus folder
    fn: str
    inputs: Callable[[np.random.Generator], tuple[list[Any], dict[str, Any]]]
    reference: Callable[..., Any]
    api: str = "legacy"
    grid: Any = None
    dtype: Any = np.float32
    outputs: Callable[[Any], Any] = field(default=lambda out: out)


# ---- references written from the callers' math (float64) ---------------------------------------


def _f64(*xs: Any) -> list[np.ndarray]:
    return [np.asarray(x, dtype=np.float64) for x in xs]


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_rmsnorm(a: Any, g: Any) -> np.ndarray:  # rmsnorm_torch.py: x * rsqrt(mean(x^2)) * g
    a, g = _f64(a, g)
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g


def ref_layernorm(x: Any, eps: float, gamma: Any, beta: Any) -> np.ndarray:  # layernorm_torch.py
    x, gamma, beta = _f64(x, gamma, beta)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def ref_matmul(lhs_t: Any, rhs: Any) -> np.ndarray:  # matrix_multiplication_torch.py: lhs @ rhs
    lhs_t, rhs = _f64(lhs_t, rhs)
    return lhs_t.T @ rhs


def ref_attention_qkv_dh_s(q: Any, k: Any, v: Any) -> np.ndarray:  # test_attention.py numpy_attention
    q, k, v = _f64(q, k, v)
    return _softmax(q.T @ k) @ v.T


def ref_sd_attention(q: Any, k: Any, v: Any) -> np.ndarray:  # sd_attention_torch.py cpu_golden_attn
    q, k, v = _f64(q, k, v)
    return _softmax((q * 0.125) @ k.T) @ v


def ref_mamba(delta: Any, u: Any, A: Any, B: Any, C: Any) -> np.ndarray:  # mamba_torch.py
    delta, u, A, B, C = _f64(delta, u, A, B, C)
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])  # [b, c, s, l]
    dBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = np.empty_like(dA)
    state = np.zeros(dA.shape[:3])
    for t in range(dA.shape[3]):
        state = dA[..., t] * state + dBu[..., t]
        scan[..., t] = state
    return (C[:, None, :, :] * scan).sum(axis=-2)


def ref_avgpool(x: Any, pool: int) -> np.ndarray:  # average_pool2d_jax.py
    (x,) = _f64(x)
    c, h, w = x.shape
    return x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4))


def ref_transpose2d(a: Any, shape2d: tuple[int, int]) -> np.ndarray:  # transpose2d_torch.py
    (a,) = _f64(a)
    p = a.shape[0]
    x, y = shape2d
    return a.reshape(p, x, y).transpose(0, 2, 1).reshape(p, x * y)


def ref_rotary(q: Any, k: Any, cos: Any, sin: Any) -> np.ndarray:
    """transformers' apply_rotary_pos_emb on [b, h, s, d] with rotate_half, stacked (q, k)."""
    q, k, cos, sin = _f64(q, k, cos, sin)

    def rot(x: np.ndarray) -> np.ndarray:
        h = x.shape[-1] // 2
        return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)

    c, s = cos[:, None], sin[:, None]
    return np.stack([q * c + rot(q) * s, k * c + rot(k) * s])


# ---- the cases ---------------------------------------------------------------------------------


def _u(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32, lo: float = 0.0, hi: float = 1.0
) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def tutorial_cases() -> list[Case]:
    T = TUTORIALS
    cases = [
        Case(
            "tensor_add_tiled",
            T,
            "tensor_addition/tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda r: ([_u(r, (256, 1024), BF16), _u(r, (256, 1024), BF16)], {}),
            lambda a, b: _f64(a)[0] + _f64(b)[0],
            dtype=BF16,
        ),
        Case(
            "spmd_tensor_add",
            T,
            "tensor_addition/spmd_tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda r: ([_u(r, (256, 1024), BF16), _u(r, (256, 1024), BF16)], {}),
            lambda a, b: _f64(a)[0] + _f64(b)[0],
            dtype=BF16,
        ),
        Case(
            "spmd_multiple_nc_tensor_add",
            T,
            "tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
            "nki_tensor_add_nc2",
            lambda r: ([_u(r, (512, 2048), BF16), _u(r, (512, 2048), BF16)], {}),
            lambda a, b: _f64(a)[0] + _f64(b)[0],
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
            lambda r: ([_u(r, (250, 512)), _u(r, (512,))], {}),
            ref_rmsnorm,
        ),
        Case(
            "softmax",
            T,
            "softmax/softmax_nki_kernels.py",
            "nki_softmax_kernel",
            lambda r: ([np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]], np.float32)], {}),
            lambda a: _softmax(_f64(a)[0], axis=1),
        ),
    ]
    for v in ("v1", "v2"):
        cases.append(
            Case(
                f"layernorm_{v}",
                T,
                "layernorm/layernorm_nki_kernel.py",
                f"nki_layernorm_kernel_{v}",
                lambda r: ([_u(r, (4096, 8192)), 1e-5, _u(r, (8192,)), _u(r, (8192,))], {}),
                ref_layernorm,
            )
        )
    cases.append(
        Case(
            "matmul_basic",
            T,
            "matrix_multiplication/matrix_multiplication_nki_kernels.py",
            "nki_matmul_basic_",
            lambda r: ([_u(r, (128, 64), BF16), _u(r, (128, 512), BF16)], {}),
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
                lambda r: ([_u(r, (1024, 4096), BF16), _u(r, (1024, 2048), BF16)], {}),
                ref_matmul,
                dtype=BF16,
            )
        )
    for v in ("v1", "v2", "v3"):

        def mamba_in(r: np.random.Generator) -> tuple[list[Any], dict[str, Any]]:
            b, c, s, n = 1, 256, 512, 16  # mamba_torch.py
            return (
                [
                    _u(r, (b, c, s), lo=0.0, hi=0.1),
                    _u(r, (b, c, s)),
                    _u(r, (c, n), lo=-1.0, hi=0.0),
                    _u(r, (b, n, s)),
                    _u(r, (b, n, s)),
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
            lambda r: ([_u(r, (4096, 64)), _u(r, (4096, 64)), _u(r, (4096, 64))], {}),
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
                lambda r, s=seqlen: ([_u(r, (128, s), lo=-1, hi=1) for _ in range(3)], {}),
                ref_attention_qkv_dh_s,
                dtype=BF16 if bf16_inside else np.float32,
            )
        )
    return cases


def nkibench_cases(root: Path) -> list[Case]:
    cases = []
    for kfile in sorted((root / "kernels").glob("*.py")):
        ref = _load_module(root / "reference" / kfile.name, f"conformance_ref_{kfile.stem}")

        def inputs(r: np.random.Generator, ref: Any = ref) -> tuple[list[Any], dict[str, Any]]:
            np.random.seed(int(r.integers(1 << 31)))
            raw = ref.get_inputs()
            return list(ref.transform_to_nki_inputs(raw)), {"raw": raw}

        def reference(*args: Any, raw: Any = None, ref: Any = ref) -> Any:
            outs = ref.forward(*[np.asarray(x, np.float64) if isinstance(x, np.ndarray) else x for x in raw])
            return outs

        def outputs(out: Any, ref: Any = ref, kfile: Path = kfile) -> Any:
            return out

        cases.append(Case(kfile.stem, NKIBENCH, f"kernels/{kfile.name}", "kernel", inputs, reference))
    return cases


# ---- running -----------------------------------------------------------------------------------


def _load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


_FRAMEWORKS = (
    "torch",
    "torch_xla",
    "torch_xla.core",
    "torch_xla.core.xla_model",
    "torch_neuronx",
    "jax",
    "jax.numpy",
    "transformers",
    "transformers.models",
    "transformers.models.llama",
    "transformers.models.llama.modeling_llama",
    "loguru",
    "torch.profiler",
)


class _Anything(types.ModuleType):
    """A stand-in for a framework module a kernel file imports but its kernels never call."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self

    def __getitem__(self, key: Any) -> Any:
        return self


def _install_framework_stand_ins() -> list[str]:
    """Stand-ins for the frameworks that are not installed; returns the names it added, so a caller
    sharing the process (the test suite) can take them out again: libraries that probe
    `sys.modules["torch"]` (scipy, xgboost) break on a stand-in."""
    added = []
    for name in _FRAMEWORKS:
        if name not in sys.modules:
            mod = _Anything(name)
            mod.__path__ = []  # type: ignore[attr-defined]
            sys.modules[name] = mod
            added.append(name)
    return added


def _kernel(case: Case, data: Path) -> Any:
    path = data / case.corpus / case.file
    sys.path.insert(0, str(path.parent))  # kernel files import their siblings
    try:
        return axon.nki.load_kernel(f"{path}:{case.fn}")
    finally:
        sys.path.remove(str(path.parent))


def _rel_err(out: Any, ref: Any) -> float:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        o = np.asarray(o, np.float64).reshape(np.shape(r))
        r = np.asarray(r, np.float64)
        if not np.all(np.isfinite(o)):
            return float("inf")
        worst = max(worst, float(np.max(np.abs(o - r)) / max(float(np.max(np.abs(r))), 1e-30)))
    return worst


def tolerance(case: Case) -> float:
    """fp32: 1e-4 of the largest reference value; bf16 inputs/outputs: bf16 rounding (2^-8)."""
    return 8e-3 if case.dtype == BF16 else REL_TOL


def run_case(case: Case, data: Path, seed: int = 0, simulate: bool = True) -> dict[str, Any]:
    from axon import sim
    from axon.target.hardware import load_hw

    row: dict[str, Any] = {
        "kernel": case.name,
        "corpus": case.corpus,
        "api": case.api,
        "file": case.file,
        "fn": case.fn,
        "import_ok": False,
        "rel_err": None,
        "emulate_s": None,
        "trace_s": None,
        "sim_us": None,
        "ok": False,
        "wrong_silent": False,
        "error": "",
    }
    try:
        fn = _kernel(case, data)
        if case.grid:
            fn = fn[case.grid]
        row["import_ok"] = True
    except Exception as exc:  # noqa: BLE001 - the report records any failure
        row["error"] = f"import: {type(exc).__name__}: {exc}"
        return row
    args, extra = case.inputs(np.random.default_rng(seed))
    try:
        t0 = time.perf_counter()
        out = axon.nki.run(fn, *args)
        row["emulate_s"] = round(time.perf_counter() - t0, 2)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"emulate: {type(exc).__name__}: {exc}" + _where(exc)
        return row
    expected = case.reference(*args, **extra)
    err = _rel_err(case.outputs(out), expected)
    row["rel_err"] = err
    if not err <= tolerance(case):
        row["wrong_silent"] = True
        row["error"] = f"wrong result: max relative error {err:.3g} > {tolerance(case):g}"
        return row
    try:
        # A fresh import: kernel files may keep state at module level across calls (the direct-
        # allocation tutorials' SBufAllocator hands out addresses once per compilation).
        fn = _kernel(case, data)
        if case.grid:
            fn = fn[case.grid]
        specs = [(a.shape, a.dtype) if isinstance(a, np.ndarray) else a for a in args]
        t0 = time.perf_counter()
        tr = axon.nki.trace(fn, *specs)
        t1 = time.perf_counter()
        if simulate:
            timing = sim.simulate(tr, load_hw("trn1"))
            row["sim_us"] = round(timing.latency_ns / 1e3, 1)
        row["trace_s"] = round(t1 - t0, 2)
        row["sim_s"] = round(time.perf_counter() - t1, 2)
        row["instructions"] = len(tr)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"trace: {type(exc).__name__}: {exc}" + _where(exc)
        return row
    row["ok"] = True
    return row


def _where(exc: BaseException) -> str:
    if isinstance(exc, AxonError):
        return ""
    tb = traceback.extract_tb(exc.__traceback__)
    return f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""


def _fingerprint(case: Case, data: Path) -> str:
    h = hashlib.sha256()
    h.update((data / case.corpus / case.file).read_bytes())
    for p in sorted((REPO / "axon" / "nki").glob("*.py")) + sorted((REPO / "axon" / "sim").glob("*.py")):
        h.update(p.read_bytes())
    h.update(Path(__file__).read_bytes())
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
    _install_framework_stand_ins()
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
