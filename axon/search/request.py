"""`TuneRequest`: everything one tuning run needs, checked and loaded once at the edge.

The hardware file is parsed and the working directory resolved when the request is made, so the
rest of the run passes the `HardwareSpec` and the `Workdir` along and reads neither again.

>>> import tempfile
>>> r = TuneRequest.make("softmax", preset="small", trials=3, workdir=tempfile.mkdtemp())
>>> r.hw.name, r.trials, r.workdir.records.name
('trn1', 3, 'records.db')
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axon.errors import SpecError
from axon.ir import KERNEL_DTYPES
from axon.measure.neuron import BACKENDS
from axon.shipped import cost_model_ref
from axon.target import DEFAULT_HW, HardwareSpec, load_hw
from axon.workdir import Workdir

SAMPLERS = ("costmodel", "tpe", "random")


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    """One `axon tune`: what to tune, on which hardware and backend, with which budget, where."""

    workload: str  # a built-in name or a spec file `path.py:function` (relative to the working directory)
    hw: HardwareSpec
    workdir: Workdir
    shape: Mapping[str, int] = field(default_factory=dict)
    preset: str = "default"
    dtype: str = "float32"
    backend: str = "sim"
    trials: int = 64
    seconds: float | None = None
    sampler: str = "costmodel"
    cost_model: str | None = None  # a file, a shipped model's name (trn1), or models:/name@alias
    seed: int = 0
    storage: str | None = None  # Optuna: a journal file or a database URL (default WORKDIR/optuna.log)
    study: str | None = None
    records: str | None = None  # a SQLite file or postgresql://... (default: the storage's URL, else WORKDIR)
    out: Path | None = None  # where the best kernel goes (default WORKDIR/kernels/...)
    track: bool = True
    tracking_uri: str | None = None
    parent_run: Any = None  # an MLflow parent run (sweeps)
    patience: int | None = None
    depth: int = 4  # variant discovery depth
    check: bool = True  # numerics and adversarial checks of the chosen kernel
    force: bool = False  # skip the HBM, host-memory and time guards
    workers: int | None = None  # processes a tune may use (`axon.forked.workers`: $AXON_CPUS, else up to 2 CPUs)

    @classmethod
    def make(
        cls,
        workload: str,
        *,
        hw: str | os.PathLike[str] | HardwareSpec = DEFAULT_HW,
        workdir: str | os.PathLike[str] | Workdir | None = None,
        out: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> TuneRequest:
        """A checked request: the hardware file loaded, the workdir resolved (`$AXON_HOME` when not
        given), a shipped cost model's name resolved to its file."""
        for name, least in (("trials", 1), ("patience", 1), ("workers", 1), ("depth", 0)):
            _check_count(name, options.get(name), least)
        seconds = options.get("seconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)):
            raise SpecError(f"seconds must be a number, got {seconds!r}")
        if seconds is not None and not float(seconds) > 0:
            raise SpecError(f"seconds must be positive, got {seconds:g}: no trial could run")
        seed = options.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**32:
            raise SpecError(f"seed must be an integer in 0..{2**32 - 1}, got {seed!r}")  # Optuna's and NumPy's
        shape = options.get("shape")
        if shape is not None and not isinstance(shape, Mapping):
            raise SpecError(f"shape must be a mapping of dimension names to sizes, like {{'M': 256}}, got {shape!r}")
        named = {"workload": workload, "workdir": workdir, "out": out} | options
        for name in ("workload", "workdir", "out", "cost_model", "storage", "study", "records", "tracking_uri"):
            value = named.get(name)
            if value is not None and not isinstance(value, (str, os.PathLike, Workdir)):
                raise SpecError(f"{name} must be a string or a path, got {value!r}")
            if name in options and isinstance(value, os.PathLike):
                options[name] = os.fspath(value)
        if options.get("dtype", "float32") not in KERNEL_DTYPES:  # a float8 kernel fails every check
            raise SpecError(f"unknown kernel dtype {options['dtype']!r}; choose {', '.join(KERNEL_DTYPES)}")
        backend = options.get("backend", "sim")
        if (
            not isinstance(backend, str) or backend not in BACKENDS
        ):  # was found by tune(), not here: a request is checked
            raise SpecError(f"unknown backend {options['backend']!r}; choose {', '.join(BACKENDS)}")
        if options.get("sampler", "costmodel") not in SAMPLERS:
            raise SpecError(f"unknown sampler {options['sampler']!r}; choose {', '.join(SAMPLERS)}")
        if options.get("cost_model") is not None:
            options["cost_model"] = cost_model_ref(options["cost_model"])
        spec = hw if isinstance(hw, HardwareSpec) else load_hw(hw)
        return cls(
            workload=os.fspath(workload),
            hw=spec,
            workdir=Workdir.resolve(workdir),
            out=Path(out).expanduser() if out else None,
            shape=dict(options.pop("shape", None) or {}),
            **options,
        )


def _check_count(name: str, value: Any, least: int) -> None:
    """`value` (None: not given) is an integer of at least `least`: a float or a string of digits
    would be taken as a budget Python compares, or fail deep in the run."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpecError(f"{name} must be an integer, got {value!r}")
    if value < least:
        raise SpecError(f"{name} must be at least {least}, got {value}")
