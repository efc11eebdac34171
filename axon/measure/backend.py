"""Measurement backends behind one protocol: `sim` (emulator trace + timing simulator) and `neuron`.

A backend takes NKI source text, the kernel's name in it and its input specs, and returns a
`Measurement`. It never decides what to measure; the tuner does, through `RecordDB`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from axon.errors import AxonError, BackendError
from axon.target import HardwareSpec

InputSpec = tuple[str, tuple[int, ...], str]  # (name, shape, dtype)


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

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Backend(Protocol):
    name: str

    def measure(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> Measurement: ...


def kernel_hash(source: str) -> str:
    """Identity of a kernel: its source text."""
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def write_kernel(source: str, directory: str | Path | None = None) -> Path:
    """The source as a file named by its hash (the emulator reports kernel lines against it)."""
    directory = Path(directory or Path(tempfile.gettempdir()) / "axon-kernels")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kernel_{kernel_hash(source)}.py"
    if not path.exists():
        path.write_text(source)
    return path


class SimBackend:
    """Trace the kernel in the NKI emulator (shapes only) and time the trace with `axon.sim`."""

    name = "sim"

    def __init__(self, kernel_dir: str | Path | None = None) -> None:
        self.kernel_dir = kernel_dir

    def measure(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> Measurement:
        from axon import nki, sim

        start = time.perf_counter()
        path = write_kernel(source, self.kernel_dir)
        try:
            fn = nki.load_kernel(f"{path}:{kernel}")
            trace = nki.trace(fn, *[(shape, dtype) for _, shape, dtype in inputs], hw=hw)
            timing = sim.simulate(trace, hw)
        except AxonError as exc:  # a kernel that breaks a rule is a failed measurement, not a crash
            return Measurement(self.name, "error", None, error=str(exc), wall_s=time.perf_counter() - start)
        return Measurement(
            backend=self.name,
            status="ok",
            latency_ns=float(timing.latency_ns),
            engine_busy_ns={k: float(v) for k, v in timing.busy_ns.items()},
            dma_bytes=int(timing.dma_bytes),
            instructions=len(trace.instructions),
            wall_s=time.perf_counter() - start,
        )


class NeuronBackend:
    """Compile and benchmark on a Trainium instance with the Neuron SDK (`neuronxcc`).

    A thin adapter: it was NOT exercised in this repository (no Trainium here). Where the SDK or a
    Neuron device is absent it raises BackendError, which the CLI reports with exit code 2.
    """

    name = "neuron"

    def __init__(self, warmup: int = 5, iters: int = 20) -> None:
        self.warmup, self.iters = warmup, iters

    @staticmethod
    def available() -> str | None:
        """None when usable, else the reason it is not."""
        try:
            spec = importlib.util.find_spec("neuronxcc")
        except ValueError:  # a module object without a spec, e.g. the emulator's import shim
            spec = None
        origin = getattr(spec, "origin", None) or ""
        axon_dir = str(Path(__file__).resolve().parents[1])
        if spec is None or not origin or str(Path(origin).resolve()).startswith(axon_dir):
            return "the Neuron SDK (neuronxcc) is not installed (only Axon's emulator shim is)"
        if shutil.which("neuron-ls") is None or not Path("/dev/neuron0").exists():
            return "no Neuron device found (/dev/neuron0)"
        return None

    def measure(self, source: str, kernel: str, inputs: Sequence[InputSpec], hw: HardwareSpec) -> Measurement:
        reason = self.available()
        if reason:
            raise BackendError(f"backend 'neuron' cannot run here: {reason}; use --backend sim")
        import numpy as np  # pragma: no cover - needs a Trainium instance
        from neuronxcc import nki as sdk_nki  # type: ignore[import-not-found]  # pragma: no cover

        path = write_kernel(source.replace("import nki\n", "import neuronxcc.nki as nki\n"))  # pragma: no cover
        spec = importlib.util.spec_from_file_location(path.stem, path)  # pragma: no cover
        module = importlib.util.module_from_spec(spec)  # pragma: no cover
        spec.loader.exec_module(module)  # type: ignore[union-attr]  # pragma: no cover
        fn = getattr(module, kernel)  # pragma: no cover
        arrays = [np.zeros(shape, dtype=np.float32) for _, shape, _ in inputs]  # pragma: no cover
        bench = sdk_nki.benchmark(warmup=self.warmup, iters=self.iters)(fn)  # pragma: no cover
        bench(*arrays)  # pragma: no cover
        p50_us = bench.benchmark_result.nc_latency.get_latency_percentile(50)  # pragma: no cover
        return Measurement(self.name, "ok", float(p50_us) * 1e3)  # pragma: no cover


BACKENDS = {"sim": SimBackend, "neuron": NeuronBackend}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    backend = BACKENDS[name]()
    if name == "neuron":
        reason = NeuronBackend.available()
        if reason:
            raise BackendError(f"backend 'neuron' cannot run here: {reason}; use --backend sim")
    return backend
