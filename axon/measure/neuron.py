"""The Trainium backend (a thin adapter over the Neuron SDK) and the choice of backend by name.

`get_backend("sim")` is the emulator and timing simulator of `axon.measure.backend`;
`get_backend("neuron")` compiles and benchmarks on a NeuronCore where the SDK and a device exist.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from axon.errors import BackendError
from axon.lazy import neuron_sdk
from axon.measure.backend import Backend, InputSpec, Measurement, SimBackend, write_kernel
from axon.target import HardwareSpec


class NeuronBackend:
    """Compile and benchmark on a Trainium instance with the Neuron SDK (`neuronxcc`).

    A thin adapter: it was NOT exercised in this repository (no Trainium here). Where the SDK or a
    Neuron device is absent it raises BackendError, which the CLI reports with exit code 2.
    """

    name = "neuron"
    version = ""  # the hardware's figure does not depend on Axon's code

    def __init__(self, kernel_dir: str | Path | None = None, warmup: int = 5, iters: int = 20) -> None:
        self._tmp = None if kernel_dir else tempfile.TemporaryDirectory(prefix="axon-kernels-")
        self.kernel_dir = Path(kernel_dir or self._tmp.name)  # type: ignore[union-attr]  # one of the two is set
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
        sdk_nki = neuron_sdk()  # pragma: no cover

        path = write_kernel(
            source.replace("import nki\n", "import neuronxcc.nki as nki\n"), self.kernel_dir
        )  # pragma: no cover
        spec = importlib.util.spec_from_file_location(path.stem, path)  # pragma: no cover
        assert spec is not None and spec.loader is not None  # pragma: no cover
        module = importlib.util.module_from_spec(spec)  # pragma: no cover
        spec.loader.exec_module(module)  # pragma: no cover
        fn = getattr(module, kernel)  # pragma: no cover
        arrays = [np.zeros(shape, dtype=np.float32) for _, shape, _ in inputs]  # pragma: no cover
        bench = sdk_nki.benchmark(warmup=self.warmup, iters=self.iters)(fn)  # pragma: no cover
        bench(*arrays)  # pragma: no cover
        p50_us = bench.benchmark_result.nc_latency.get_latency_percentile(50)  # pragma: no cover
        return Measurement(self.name, "ok", float(p50_us) * 1e3)  # pragma: no cover


BACKENDS: dict[str, Callable[..., Backend]] = {"sim": SimBackend, "neuron": NeuronBackend}


def get_backend(name: str, kernel_dir: str | Path | None = None, workers: int = 1) -> Backend:
    """The backend `name`, writing the kernel files it traces or compiles into `kernel_dir`; the
    simulator with `workers` processes (`SimBackend`)."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "sim":
        return SimBackend(kernel_dir, workers=workers)
    backend = BACKENDS[name](kernel_dir)
    if name == "neuron":
        reason = NeuronBackend.available()
        if reason:
            raise BackendError(f"backend 'neuron' cannot run here: {reason}; use --backend sim")
    return backend
