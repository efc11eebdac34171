"""The public NKI kernels nobody here wrote (../shared/data): the nki-samples tutorials and the seven
compiler-style NKIBench kernels measured on trn1. Loading them unmodified (with stand-ins for the
framework modules their files import), their inputs and float64 references written from their
callers' math, and running one: the emulator's numerics check against the reference, then a trace
at the same shape for the timing simulator.

Shared by `conformance.py` (every kernel at its caller's shape), `calibration.py` (the measured
kernels) and `results_table.py` (the kernels a user would compare Axon with, at the table's shapes).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import axon.nki  # noqa: E402
from axon import sim  # noqa: E402
from axon.errors import AxonError  # noqa: E402
from axon.target.hardware import load_hw  # noqa: E402

TUTORIALS = "nki-samples-tutorials"
NKIBENCH = "nkibench-trn1"
DATA = REPO.parent / "shared" / "data"  # the corpora's folder (present in CI)
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


def f64(*xs: Any) -> list[np.ndarray]:
    return [np.asarray(x, dtype=np.float64) for x in xs]


def softmax_ref(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_rmsnorm(a: Any, g: Any) -> np.ndarray:  # rmsnorm_torch.py: x * rsqrt(mean(x^2)) * g
    a, g = f64(a, g)
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g


def ref_layernorm(x: Any, eps: float, gamma: Any, beta: Any) -> np.ndarray:  # layernorm_torch.py
    x, gamma, beta = f64(x, gamma, beta)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def ref_matmul(lhs_t: Any, rhs: Any) -> np.ndarray:  # matrix_multiplication_torch.py: lhs @ rhs
    lhs_t, rhs = f64(lhs_t, rhs)
    return lhs_t.T @ rhs


def ref_attention_qkv_dh_s(q: Any, k: Any, v: Any) -> np.ndarray:  # test_attention.py numpy_attention
    q, k, v = f64(q, k, v)
    return softmax_ref(q.T @ k) @ v.T


def ref_sd_attention(q: Any, k: Any, v: Any) -> np.ndarray:  # sd_attention_torch.py cpu_golden_attn
    q, k, v = f64(q, k, v)
    return softmax_ref((q * 0.125) @ k.T) @ v


def ref_mamba(delta: Any, u: Any, A: Any, B: Any, C: Any) -> np.ndarray:  # mamba_torch.py
    delta, u, A, B, C = f64(delta, u, A, B, C)
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])  # [b, c, s, l]
    dBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = np.empty_like(dA)
    state = np.zeros(dA.shape[:3])
    for t in range(dA.shape[3]):
        state = dA[..., t] * state + dBu[..., t]
        scan[..., t] = state
    return (C[:, None, :, :] * scan).sum(axis=-2)


def ref_avgpool(x: Any, pool: int) -> np.ndarray:  # average_pool2d_jax.py
    (x,) = f64(x)
    c, h, w = x.shape
    return x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4))


def ref_transpose2d(a: Any, shape2d: tuple[int, int]) -> np.ndarray:  # transpose2d_torch.py
    (a,) = f64(a)
    p = a.shape[0]
    x, y = shape2d
    return a.reshape(p, x, y).transpose(0, 2, 1).reshape(p, x * y)


def ref_rotary(q: Any, k: Any, cos: Any, sin: Any) -> np.ndarray:
    """transformers' apply_rotary_pos_emb on [b, h, s, d] with rotate_half, stacked (q, k)."""
    q, k, cos, sin = f64(q, k, cos, sin)

    def rot(x: np.ndarray) -> np.ndarray:
        h = x.shape[-1] // 2
        return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)

    c, s = cos[:, None], sin[:, None]
    return np.stack([q * c + rot(q) * s, k * c + rot(k) * s])


# ---- the cases ---------------------------------------------------------------------------------


def uniform(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = np.float32, lo: float = 0.0, hi: float = 1.0
) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def nkibench_case(root: Path, name: str) -> Case:
    """The NKIBench task `name` (`kernels/NAME.py`, entry point `kernel`, with `reference/NAME.py`)."""
    kfile, rfile = root / "kernels" / f"{name}.py", root / "reference" / f"{name}.py"
    for path in (kfile, rfile):
        if not path.is_file():
            raise FileNotFoundError(f"NKIBench task {name!r}: {path} not found (corpus folder {root})")
    ref = load_module(rfile, f"corpus_ref_{name}")

    def inputs(r: np.random.Generator) -> tuple[list[Any], dict[str, Any]]:
        np.random.seed(int(r.integers(1 << 31)))
        raw = ref.get_inputs()
        return list(ref.transform_to_nki_inputs(raw)), {"raw": raw}

    def reference(*args: Any, raw: Any = None) -> Any:
        return ref.forward(*[np.asarray(x, np.float64) if isinstance(x, np.ndarray) else x for x in raw])

    return Case(name, NKIBENCH, f"kernels/{name}.py", "kernel", inputs, reference)


def nkibench_cases(root: Path) -> list[Case]:
    return [nkibench_case(root, kfile.stem) for kfile in sorted((root / "kernels").glob("*.py"))]


# ---- running -----------------------------------------------------------------------------------


def load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_kernel(case: Case, data: Path) -> Any:
    """The case's kernel function, freshly imported from its file under `data` (its grid applied).

    Fresh each time: kernel files may keep state at module level across calls (the direct-
    allocation tutorials' SBufAllocator hands out addresses once per compilation)."""
    path = data / case.corpus / case.file
    if not path.is_file():
        raise FileNotFoundError(f"{case.name}: kernel file {path} not found (corpus folder {data / case.corpus})")
    sys.path.insert(0, str(path.parent))  # kernel files import their siblings
    try:
        fn = axon.nki.load_kernel(f"{path}:{case.fn}")
    finally:
        sys.path.remove(str(path.parent))
    return fn[case.grid] if case.grid else fn


def rel_err(out: Any, ref: Any) -> float:
    """The largest absolute error over all outputs, relative to the largest reference value."""
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


def check_numerics(case: Case, data: Path, seed: int = 0) -> dict[str, Any]:
    """Run the kernel in the emulator on the case's inputs and compare with its float64 reference.

    Returns `import_ok`, `rel_err`, `emulate_s`, `ok` (within `tolerance`), `wrong_silent` (ran
    without error but the numbers are wrong) and `error` (empty when ok)."""
    row: dict[str, Any] = {
        "import_ok": False,
        "rel_err": None,
        "emulate_s": None,
        "ok": False,
        "wrong_silent": False,
        "error": "",
    }
    try:
        fn = load_kernel(case, data)
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
    err = rel_err(case.outputs(out), case.reference(*args, **extra))
    row["rel_err"] = err
    if not err <= tolerance(case):
        row["wrong_silent"] = True
        row["error"] = f"wrong result: max relative error {err:.3g} > {tolerance(case):g}"
        return row
    row["ok"] = True
    return row


def trace_case(case: Case, data: Path, hw: str = "trn1") -> Any:
    """The kernel's trace at the case's input shapes (shapes only, no numbers) on hardware `hw`."""
    args, _ = case.inputs(np.random.default_rng(0))
    specs = [(a.shape, a.dtype) if isinstance(a, np.ndarray) else a for a in args]
    return axon.nki.trace(load_kernel(case, data), *specs, hw=hw)


def run_case(case: Case, data: Path, seed: int = 0, simulate: bool = True) -> dict[str, Any]:
    """`check_numerics`, then (when it passed) trace and simulate on trn1: one conformance row."""
    row: dict[str, Any] = {
        "kernel": case.name,
        "corpus": case.corpus,
        "api": case.api,
        "file": case.file,
        "fn": case.fn,
        **check_numerics(case, data, seed),
        "trace_s": None,
        "sim_us": None,
    }
    if not row["ok"]:
        return row
    row["ok"] = False
    try:
        t0 = time.perf_counter()
        tr = trace_case(case, data)
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
