"""Measurement backends behind one protocol: `sim` (emulator trace + timing simulator) here, `neuron`
in `axon.measure.neuron` (which also picks a backend by name).

A backend takes NKI source text, the kernel's name in it and its input specs, and returns a
`Measurement`. It never decides what to measure; the tuner does, through `RecordDB`.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from axon import nki, sim
from axon.errors import AxonError
from axon.forked import ChildFailed, Forked
from axon.gcpause import gc_paused
from axon.measure.extrapolate import RunSummary, extrapolated, summarize
from axon.measure.prefix import kernel_def, prefix_trace, returns_after_last_loop
from axon.measure.samecode import code_key, module_tree
from axon.target import HardwareSpec

InputSpec = tuple[str, tuple[int, ...], str]  # (name, shape, dtype)

# The code a simulated latency depends on besides the kernel and the hardware file: the emulator,
# the simulator, the cost tables and this backend's extrapolation (folders or files under `axon/`).
TIMING_SOURCES = ("nki", "sim", "target", "measure/backend.py", "measure/prefix.py", "measure/extrapolate.py")


@functools.cache
def timing_version() -> str:
    """A hash of `TIMING_SOURCES` as installed: the simulator's version. Records measured by another
    version time the same kernel otherwise (or might), so the tuner does not reuse them."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for rel in TIMING_SOURCES:
        p = root / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Measurement:
    """What a backend reports for one kernel. `latency_ns` is None unless status == "ok"."""

    backend: str
    status: str  # "ok" | "error"
    latency_ns: float | None
    engine_busy_ns: dict[str, float] = field(default_factory=dict)
    dma_bytes: int = 0
    instructions: int = 0
    error: str = ""
    wall_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    version: str = ""  # the measuring code's version (`Backend.version`): a measurement of another is not reused

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Backend(Protocol):
    name: str

    @property
    def version(self) -> str:
        """What its measurements depend on besides the kernel and the hardware file ("" for hardware)."""
        ...

    def measure(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> Measurement: ...


def kernel_hash(source: str) -> str:
    """Identity of a kernel: its source text."""
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def write_kernel(source: str, directory: str | Path) -> Path:
    """The source as `directory/kernel_<hash>.py` (the emulator reports kernel lines against it).

    The directory is the caller's: `axon tune` passes WORKDIR/cache/kernels, so kernels stay with
    the records that name them. Written atomically (two workers may write the same kernel).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kernel_{kernel_hash(source)}.py"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return path


def kernel_cache(workdir: str | Path) -> Path:
    """Where a work directory keeps the kernel files its backends trace: WORKDIR/cache/kernels."""
    return Path(workdir) / "cache" / "kernels"


class SimBackend:
    """Trace the kernel in the NKI emulator (shapes only) and time the trace with `axon.sim`.

    Large kernels are timed by extrapolation (`extrapolate=True`, the default): every top-level
    loop of at least `STEPS` iterations is cut to the same fraction f of its iterations and then
    to 2f (f = 1/STEPS, or larger so that the shortest cut loop runs at least 2 iterations), both
    partial traces are simulated, and the kernel's latency is extended linearly from the growth
    between them (all loops grow in proportion, as they do in the whole kernel, so loops that
    overlap are not counted twice). Instruction counts and DMA bytes extrapolate exactly.
    Kernels with no such loop are simulated whole. A kernel that ends with its one such loop is
    traced once, the shorter trace cut out of the longer (`axon.measure.prefix`, exact).
    `experiments/bench_extrapolation.py` reports the error of the extrapolation against whole
    simulation; `Measurement.details["timing"]` says which was used.
    """

    name = "sim"
    STEPS = 16

    @property
    def version(self) -> str:
        return timing_version()

    def __init__(self, kernel_dir: str | Path | None = None, extrapolate: bool = True, workers: int = 1) -> None:
        # without a directory, a temporary one that goes with the backend (nothing left behind)
        self._tmp = None if kernel_dir else tempfile.TemporaryDirectory(prefix="axon-kernels-")
        self.kernel_dir = Path(kernel_dir or self._tmp.name)  # type: ignore[union-attr]  # one of the two is set
        self.extrapolate = extrapolate
        self.workers = workers  # 2: the shorter of two partial runs is traced and simulated by a forked child
        self._by_code: dict[tuple[Any, ...], tuple[HardwareSpec, Measurement]] = {}
        self.same_code = 0  # measurements given from a kernel of the same code

    def measure(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> Measurement:
        """The kernel's measurement; a kernel of the same code as one this backend measured ok
        (`axon.measure.samecode`) gets that measurement (its own `wall_s`) and counts in `same_code`."""
        start = time.perf_counter()
        # the parse of a long generated kernel (`code_key`) and its traces are hundreds of thousands
        # of small objects: without the cycle collector (`axon.gcpause`), which walked the tuner's
        # whole heap during the parse (a tenth of an attention tune's CPU), for the measurement
        # whole, and the parsed source is dropped before it is on again (it would survive into the
        # next collections: a long kernel's tree is a few hundred thousand objects)
        with gc_paused():
            try:
                code = code_key(source)
                key = _same_code_key(code, kernel, inputs, hw)
                done = self._by_code.get(key) if code is not None else None
                if done is not None and done[0] is hw:
                    write_kernel(source, self.kernel_dir)  # its file, as a traced kernel's (WORKDIR/cache/kernels)
                    self.same_code += 1
                    m = done[1]
                    return replace(m, details=copy.deepcopy(m.details), wall_s=time.perf_counter() - start)
                m = replace(self._measure(source, kernel, inputs, hw), version=self.version)
            finally:
                module_tree.cache_clear()
        if code is not None and m.status == "ok":
            self._by_code[key] = (hw, m)  # the hardware object kept, so that its id stays its own
        return m

    def remember(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec, m: Measurement) -> None:
        """Keep `m`, this kernel's measurement made elsewhere (a forked child of this process, by this
        backend's code), as `measure` keeps its own: `measure` then gives it for this kernel's code."""
        with gc_paused():
            try:
                code = code_key(source)
            finally:
                module_tree.cache_clear()
        if code is not None and m.status == "ok":
            self._by_code[_same_code_key(code, kernel, inputs, hw)] = (hw, m)

    def _measure(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> Measurement:
        start = time.perf_counter()
        path = write_kernel(source, self.kernel_dir)
        specs = [(shape, dtype) for _, shape, dtype in inputs]
        steps = self.STEPS

        def cut(k: int, div: int) -> Any:
            return lambda trips: trips if trips < steps else -(-trips * k // div)

        try:
            fn = nki.load_kernel(f"{path}:{kernel}")
            loops: dict[int, int] = {}
            ta = None
            # the loop structure first: read from the source where its top-level loops have literal
            # trip counts (checked against the first trace below), else from a trace cut to one
            # iteration per top-level loop
            literal = top_level_trips(source, kernel) if self.extrapolate else None
            if literal is not None and not any(n >= steps for n in literal):
                trace = nki.trace(fn, *specs, hw=hw)
                if not _cut_loops(trace, steps):
                    return _measurement(
                        self.name, sim.simulate(trace, hw), len(trace.instructions), start, {"timing": "whole"}
                    )
                literal = None  # the source misled: trace it as if it had not been read
            long = [n for n in literal or () if n >= steps]
            if len(long) == 1 and returns_after_last_loop(source, kernel):
                got = self._one_loop(fn, specs, hw, long[0], start)
                if got is not None:
                    return got
            if literal is not None:
                div = min(steps, min(n for n in literal if n >= steps) // 2)
                ta = nki.trace(fn, *specs, hw=hw, loop_limit=cut(1, div))
                loops = _cut_loops(ta, steps)
                if sorted(loops.values()) != sorted(n for n in literal if n >= steps):
                    ta, loops = None, {}
            if ta is None and self.extrapolate:
                probe = nki.trace(fn, *specs, hw=hw, loop_limit=1)
                loops = _cut_loops(probe, steps)
            if not loops:
                trace = nki.trace(fn, *specs, hw=hw)
                return _measurement(
                    self.name, sim.simulate(trace, hw), len(trace.instructions), start, {"timing": "whole"}
                )
            # the same fraction of every cut loop, the smallest getting 2 iterations in the first run
            div = min(steps, min(loops.values()) // 2)
            first = ta

            def run_a() -> RunSummary:
                t = first if first is not None else nki.trace(fn, *specs, hw=hw, loop_limit=cut(1, div))
                return summarize(t, sim.simulate(t, hw), loops)

            sa, (tb, timing_b) = self._two_runs(run_a, lambda: _traced(fn, specs, hw, cut(2, div)))
        except AxonError as exc:  # a kernel that breaks a rule is a failed measurement, not a crash
            return Measurement(self.name, "error", None, error=str(exc), wall_s=time.perf_counter() - start)
        counts = {lid: (cut(1, div)(n), cut(2, div)(n), n) for lid, n in loops.items()}
        return _measured(self.name, extrapolated(sa, tb, timing_b, counts), start)

    def _two_runs(self, run_a: Any, run_b: Any) -> tuple[RunSummary, Any]:
        """(run_a(), run_b()): with two workers run a in a forked child while this process does run b;
        an error is run a's when both fail, as when they run one after the other."""
        if self.workers < 2:
            return run_a(), run_b()
        child = Forked(run_a)
        start = time.perf_counter()
        try:
            b = run_b()
        except AxonError:
            child.cancel()
            run_a()  # raises first when run a fails too
            raise
        except BaseException:
            child.cancel()
            raise
        try:
            return child.result(timeout=max(60.0, 10 * (time.perf_counter() - start))), b  # run a is the shorter
        except ChildFailed:
            return run_a(), b

    def _one_loop(self, fn: Any, specs: list[Any], hw: HardwareSpec, trips: int, start: float) -> Measurement | None:
        """The extrapolated measurement of a kernel that ends with its one long top-level loop of
        `trips` iterations (`returns_after_last_loop`): the longer partial trace only, the shorter
        one its prefix (`prefix_trace`), both timed in one simulation. Exactly what tracing and
        simulating both gives; None where the traces do not have that form, or on any error (the
        caller then measures the usual way, which reports the error as it always did)."""
        div = min(self.STEPS, trips // 2)
        ca, cb = -(-trips // div), -(-trips * 2 // div)
        try:
            tb = nki.trace(fn, *specs, hw=hw, loop_limit=lambda n: n if n < self.STEPS else -(-n * 2 // div))
        except AxonError:
            return None
        loops = _cut_loops(tb, self.STEPS)
        if list(loops.values()) != [trips]:
            return None
        (lid,) = loops
        ta = prefix_trace(tb, lid, ca)
        if ta is None:
            return None
        try:
            timing_b, timing_a = sim.simulate_with_prefix(tb, ta, hw)
        except AxonError:
            return None
        return _measured(
            self.name, extrapolated(summarize(ta, timing_a, loops), tb, timing_b, {lid: (ca, cb, trips)}), start
        )


def _same_code_key(code: Any, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> tuple[Any, ...]:
    return (code, kernel, tuple((n, tuple(s), d) for n, s, d in inputs), id(hw))


def _traced(fn: Any, specs: list[Any], hw: HardwareSpec, limit: Any) -> tuple[Any, Any]:
    trace = nki.trace(fn, *specs, hw=hw, loop_limit=limit)
    return trace, sim.simulate(trace, hw)


def _measured(name: str, fields: dict[str, Any], start: float) -> Measurement:
    return Measurement(backend=name, status="ok", wall_s=time.perf_counter() - start, **fields)


def _cut_loops(trace: Any, steps: int) -> dict[int, int]:
    """The top-level loops of `trace` long enough to cut (at least `steps` iterations): id -> trips."""
    return {l.id: l.trip_count for l in trace.loops if l.parent is None and l.trip_count >= steps}


_RANGES = ("affine_range", "sequential_range", "static_range", "dynamic_range")  # the NKI loops a trace records


def top_level_trips(source: str, kernel: str) -> list[int] | None:
    """The trip counts of the top-level loops of `kernel` in `source`, in order, when every statement
    of its body is either a loop over a range of a literal size or holds no loop at all; None when
    the source does not say (a computed trip count, a loop under an `if`, no such function)."""
    fn = kernel_def(source, kernel)
    if fn is None:
        return None
    trips: list[int] = []
    for stmt in fn.body:
        if isinstance(stmt, ast.For):
            call = stmt.iter
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in _RANGES
                and len(call.args) == 1
            ):
                return None
            size = call.args[0]
            if not isinstance(size, ast.Constant) or type(size.value) is not int or stmt.orelse:
                return None
            trips.append(size.value)
        elif any(isinstance(n, (ast.For, ast.While, ast.AsyncFor)) for n in ast.walk(stmt)):
            return None
    return trips


def _measurement(name: str, timing: Any, instructions: int, start: float, details: dict[str, Any]) -> Measurement:
    return Measurement(
        backend=name,
        status="ok",
        latency_ns=float(timing.latency_ns),
        engine_busy_ns={k: float(v) for k, v in timing.busy_ns.items()},
        dma_bytes=int(timing.dma_bytes),
        instructions=instructions,
        wall_s=time.perf_counter() - start,
        details=details,
    )
