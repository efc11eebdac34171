"""The kernels a user would otherwise run, as cells of the results table: the Neuron compiler's (the
compiler-style NKIBench kernels measured on trn1) and AWS's tutorial kernels (nki-samples).

Each is run unmodified (`corpus.py`): the emulator's numerics check against its float64 reference at
the row's shape and dtype, then a trace at that shape timed whole by the timing simulator with the
same hardware file as Axon. Where a tutorial has several versions, every version is run and the
fastest one that passes is the cell (the others, and why a version could not run, go to the notes).

Cells are cached under WORK/rivals by what decides them: the numerics result by the kernel (and
reference) file, the corpus and cell definitions and the emulator's source; the timing by those, the
hardware file and the simulator's and cost model's source. A re-run redoes neither unless one changed.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from corpus import (
    BF16,
    NKIBENCH,
    REPO,
    TUTORIALS,
    Case,
    check_numerics,
    nkibench_case,
    ref_attention_qkv_dh_s,
    ref_layernorm,
    ref_matmul,
    ref_rmsnorm,
    softmax_ref,
    trace_case,
    uniform,
)

from axon import sim
from axon.target import load_hw

# workload -> (NKIBench task, the workload's dims at that task's shape); float32, as the tasks are
COMPILER_TASKS: dict[str, tuple[str, dict[str, int]]] = {
    "silu": ("silu_M4096_N7168", {"M": 4096, "N": 7168}),
    "adamw": ("adamw_M10944_N2048", {"M": 10944, "N": 2048}),
    "matmul": ("matmul_M4096_N12288_K5120", {"M": 4096, "K": 5120, "N": 12288}),
    "add_rmsnorm_matmul": ("add_rmsnorm_matmul_M4096_N2048_K1024", {"M": 4096, "K": 1024, "N": 2048}),
    "bmm_softmax": ("bmm_softmax_B16_K64_M4096_N4096", {"B": 16, "M": 4096, "K": 64, "N": 4096}),
    "lora": ("lora_M4096_N12288_K5120_R128", {"M": 4096, "K": 5120, "N": 12288, "R": 128}),
    "rope": ("rope_single_freq_apply_B1_H64_N4096_D128", {"H": 64, "S": 4096, "D": 128}),
}
# where a task's inputs or outputs differ from the workload's spec (the cell is still that task)
COMPILER_NOTES = {
    "rope": "the task's x is [D, H*S] and its cos and sin are given per head and token ([D/2, H*S] each), "
    "so it reads 2x the HBM bytes of Axon's rope (cos and sin [S, D/2])",
    "adamw": "the task returns the new theta only; Axon's spec also writes m and v (3x the output bytes)",
    "add_rmsnorm_matmul": "the task's eps is 1e-5 (Axon's spec: 1e-6)",
}
ATTENTION_VERSIONS = ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11")
MATMUL_VERSIONS = ("tiled", "hoist_load", "block_free_dimension", "fully_optimized")
# what decides a cell besides its kernel file (paths relative to the repository)
NUMERICS_SOURCES = ("axon/nki", "experiments/corpus.py", "experiments/rivals.py")
TIMING_SOURCES = (*NUMERICS_SOURCES, "axon/sim", "axon/target")


@dataclass(frozen=True)
class Rival:
    """One cell: the kernel versions to run (the fastest that passes is reported) and how to time them.

    `launches`: how many times a caller runs the kernel for the row (the tutorial attention kernels
    take one head); the cell counts one launch overhead for all of them, as one kernel over all heads
    would pay (generous to the tutorial)."""

    kind: str  # "compiler" | "nki-samples"
    cases: tuple[Case, ...]
    launches: int = 1
    note: str = ""


def _dtype(dtype: str) -> Any:
    return BF16 if dtype == "bfloat16" else np.dtype(dtype)


def compiler_rival(workload: str, dims: dict[str, int], dtype: str, data: Path) -> Rival | None:
    """The NKIBench compiler-style kernel of `workload` at `dims` (None when the corpus has no task at
    that shape and dtype); a task it names whose files are missing is an error, not a blank cell."""
    entry = COMPILER_TASKS.get(workload)
    if entry is None or entry[1] != dims or dtype != "float32":
        return None
    return Rival("compiler", (nkibench_case(data / NKIBENCH, entry[0]),), note=COMPILER_NOTES.get(workload, ""))


def _case(name: str, file: str, fn: str, inputs: Callable, ref: Callable, dtype: Any) -> Case:
    return Case(name, TUTORIALS, file, fn, lambda r: (inputs(r), {}), ref, dtype=dtype)


def samples_rival(workload: str, dims: dict[str, int], dtype: str) -> Rival | None:
    """The nki-samples tutorial kernel(s) for `workload` at `dims` and `dtype`, with inputs laid out as
    the tutorial's caller lays them out (None when there is no tutorial for the workload)."""
    dt, shape = _dtype(dtype), "x".join(f"{k}{v}" for k, v in dims.items())
    tag = f"@{shape}:{dtype}"
    if workload == "rmsnorm":
        m, n = dims["M"], dims["N"]
        case = _case(
            "rmsnorm" + tag,
            "rmsnorm/rmsnorm_nki_kernels.py",
            "nki_rmsnorm_kernel",
            lambda r: [uniform(r, (m, n), dt), uniform(r, (n,), dt)],
            ref_rmsnorm,
            dt,
        )
        return Rival("nki-samples", (case,), note="rmsnorm: the tutorial has no eps (Axon's spec adds 1e-6)")
    if workload == "softmax":
        m, n = dims["M"], dims["N"]
        case = _case(
            "softmax" + tag,
            "softmax/softmax_nki_kernels.py",
            "nki_softmax_kernel",
            lambda r: [uniform(r, (m, n), dt, -4.0, 4.0)],
            lambda a: softmax_ref(np.asarray(a, np.float64), axis=1),
            dt,
        )
        return Rival("nki-samples", (case,))
    if workload == "layernorm":
        m, n = dims["M"], dims["N"]
        cases = tuple(
            _case(
                f"layernorm_{v}" + tag,
                "layernorm/layernorm_nki_kernel.py",
                f"nki_layernorm_kernel_{v}",
                lambda r: [uniform(r, (m, n), dt), 1e-5, uniform(r, (n,), dt), uniform(r, (n,), dt)],
                ref_layernorm,
                dt,
            )
            for v in ("v1", "v2")
        )
        return Rival("nki-samples", cases)
    if workload == "matmul":  # the caller passes lhs transposed: lhsT [K, M], rhs [K, N]
        m, k, n = dims["M"], dims["K"], dims["N"]
        cases = tuple(
            _case(
                f"matmul_{v}" + tag,
                "matrix_multiplication/matrix_multiplication_nki_kernels.py",
                f"nki_matmul_{v}_",
                lambda r: [uniform(r, (k, m), dt), uniform(r, (k, n), dt)],
                ref_matmul,
                dt,
            )
            for v in MATMUL_VERSIONS
        )
        return Rival("nki-samples", cases, note="matmul: lhs passed transposed ([K, M]), as the tutorial's caller does")
    if workload == "attention":  # one head per launch, q, k, v as [d_head, seqlen], values in [-1, 1]
        h, s, d = dims["H"], dims["S"], dims["D"]
        # Held to the row's dtype: v7 and later cast q, k, v and the softmax to bf16 inside, so in a
        # float32 row they fail the float32 tolerance (conformance.py holds them to bf16 rounding).
        cases = tuple(
            _case(
                f"attention_{v}" + tag,
                "attention_fwd_performance/attention_kernels.py",
                f"attn_fwd_{v}",
                lambda r: [uniform(r, (d, s), dt, -1.0, 1.0) for _ in range(3)],
                ref_attention_qkv_dh_s,
                dt,
            )
            for v in ATTENTION_VERSIONS
        )
        note = (
            f"attention: the tutorial kernels take one head ([d_head, seqlen]); the cell is {h} head(s) x one "
            "launch's simulated time less the launch overhead of all but one; they do not scale q k^T by "
            "1/sqrt(d) (Axon's spec does); each version is held to the row's dtype (v7 and later compute in "
            "bf16 inside: a float32 row's tolerance refuses them)"
        )
        return Rival("nki-samples", cases, launches=h, note=note)
    return None


def source_hash(paths: tuple[str, ...], *extra: Any) -> str:
    """A hash of the Python sources under `paths` (folders or files, relative to the repository) and `extra`."""
    h = hashlib.sha256()
    for rel in paths:
        p = REPO / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f.read_bytes())
    h.update(repr(extra).encode())
    return h.hexdigest()[:20]


def _case_files(case: Case, data: Path) -> list[bytes]:
    files = [(data / case.corpus / case.file).read_bytes()]
    if case.corpus == NKIBENCH:
        files.append((data / NKIBENCH / "reference" / Path(case.file).name).read_bytes())
    return files


class NotCached(LookupError):
    """A cell piece that is not stored yet, asked for without computing it (`--cached-only`)."""


def _cached(path: Path, make: Callable[[], dict[str, Any]], compute: bool = True) -> dict[str, Any]:
    """The result stored at `path`, else `make()` (stored)."""
    if path.exists():
        return json.loads(path.read_text())
    if not compute:
        raise NotCached(path.name)
    value = in_child(make)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(value, default=float))
    tmp.replace(path)
    return value


def in_child(make: Callable[[], Any]) -> Any:
    """`make()` run in a forked child process, its result sent back: emulating a full-size kernel
    takes the emulator many GB (about 11 GB for the compiler's matmul at M4096 N12288 K5120), which
    a long-lived table process would otherwise keep (it was killed by the kernel's OOM killer once)."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def run() -> None:
        try:
            send.send((True, make()))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent as it is
            send.send((False, exc))

    child = ctx.Process(target=run)
    child.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        raise RuntimeError(f"the child computing a rival cell died (exit code {child.exitcode})") from None
    finally:
        child.join()
    if not ok:
        raise value
    return value


def _time_case(case: Case, data: Path, hw_name: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        trace = trace_case(case, data, hw_name)
    except Exception as exc:  # noqa: BLE001 - a version that cannot be traced is a note, not a crash
        return {"ns": None, "error": f"trace: {type(exc).__name__}: {exc}"}
    t1 = time.perf_counter()
    timing = sim.simulate(trace, load_hw(hw_name))
    t2 = time.perf_counter()
    return {
        "ns": float(timing.latency_ns),
        "instructions": len(trace.instructions),
        "trace_s": t1 - t0,
        "sim_s": t2 - t1,
    }


def measure(rival: Rival, hw_name: str, data: Path, work: Path, compute: bool = True) -> dict[str, Any] | None:
    """The cell: `ns` (None when no version passed), `version`, per-version results, `rel_err`,
    `seconds` spent now (about 0 when every piece was cached) and `note`; None when `compute` is
    False and a piece is not cached yet."""
    hw = load_hw(hw_name)
    start = time.perf_counter()
    versions: dict[str, dict[str, Any]] = {}
    for case in rival.cases:
        files = _case_files(case, data)
        nkey = source_hash(NUMERICS_SOURCES, case.name, files)
        try:
            num = _cached(work / "rivals" / f"numerics_{nkey}.json", lambda c=case: check_numerics(c, data), compute)
        except NotCached:
            return None
        if not num["ok"]:
            versions[case.name] = {"ns": None, "error": num["error"][:300]}
            continue
        tkey = source_hash(TIMING_SOURCES, case.name, files, hw.file_hash)
        try:
            timed = _cached(
                work / "rivals" / f"timing_{hw_name}_{tkey}.json", lambda c=case: _time_case(c, data, hw_name), compute
            )
        except NotCached:
            return None
        ns = timed["ns"]
        if ns is not None:
            ns = rival.launches * ns - (rival.launches - 1) * hw.costs.launch_overhead_ns
        versions[case.name] = {**timed, "ns": ns, "rel_err": num["rel_err"], "emulate_s": num["emulate_s"]}
    ok = {name: v for name, v in versions.items() if v.get("ns")}
    best = min(ok, key=lambda name: ok[name]["ns"]) if ok else None
    return {
        "kind": rival.kind,
        "ns": ok[best]["ns"] if best else None,
        "version": best,
        "rel_err": ok[best]["rel_err"] if best else None,
        "versions": versions,
        "seconds": time.perf_counter() - start,
        "note": rival.note,
    }
