"""Sweep configuration files (`configs/sweeps/*.yaml`): parsed into a frozen `SweepConfig`.

An entry's `workload` is a built-in name or a spec file `path.py:function`; a relative spec path is
taken from the directory of the config file (not the working directory), so a config and its specs
move together. Errors name the file and the field. This module reads configuration only;
`axon.search.sweep` runs it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from axon.errors import SpecError
from axon.ir import KERNEL_DTYPES
from axon.measure.neuron import BACKENDS
from axon.target import DEFAULT_HW
from axon.workloads import is_spec_ref
from axon.yamlfile import load_yaml

SAMPLERS = ("costmodel", "tpe", "random")


@dataclass(frozen=True)
class SweepEntry:
    workload: str
    preset: str = "default"
    shape: tuple[tuple[str, int], ...] = ()
    dtype: str = "float32"

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    def key(self, hw: str) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.shape)
        return f"{self.workload}[{self.preset}{(';' + dims) if dims else ''}]:{self.dtype}@{hw}"


@dataclass(frozen=True)
class SweepConfig:
    name: str
    hw: tuple[str, ...]
    entries: tuple[SweepEntry, ...]
    backend: str = "sim"
    sampler: str = "costmodel"
    trials: int = 32
    seed: int = 0
    regression_threshold: float = 0.05
    registered_model: str = "axon-costmodel-{hw}"
    source: str = ""

    @property
    def digest(self) -> str:
        data = asdict(self)
        data.pop("source")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]

    def tasks(self) -> list[tuple[str, SweepEntry]]:
        return [(hw, e) for hw in self.hw for e in self.entries]

    def hw_file(self, hw: str) -> str:
        """What to load for `hw`: a relative hardware file path is taken from the config file's directory
        when it is there, as a spec's path is (it was taken from the working directory: the same config
        ran from its own directory and failed from any other); a built-in name or any other path as given."""
        if not self.source or os.path.isabs(hw) or not (hw.endswith((".yaml", ".yml")) or os.sep in hw):
            return hw
        beside = os.path.join(os.path.dirname(os.path.abspath(self.source)), os.path.expanduser(hw))
        return beside if os.path.isfile(beside) else hw

    def workload(self, entry: SweepEntry) -> str:
        """What to tune for `entry`: a built-in name, or its spec file with the path taken from the
        config file's directory."""
        return resolve_workload(entry.workload, os.path.dirname(os.path.abspath(self.source)) if self.source else None)


def resolve_workload(workload: str, base: str | None) -> str:
    """`specs/m.py:f` -> `<base>/specs/m.py:f`; built-in names and absolute paths as they are."""

    if not is_spec_ref(workload) or base is None:
        return workload
    path, _, fn = workload.rpartition(":")
    return f"{os.path.abspath(os.path.join(base, os.path.expanduser(path)))}:{fn}"


def _field(data: dict, name: str, kind: type | tuple, file: str, default: Any = None, required: bool = False) -> Any:
    if name not in data:
        if required:
            raise SpecError(f"{file}: missing field {name}")
        return default
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise SpecError(f"{file}: field {name} has the wrong type ({type(value).__name__})")
    return value


ENTRY_FIELDS = frozenset({"workload", "preset", "shape", "dtype"})


def load_sweep(path: str | Path) -> SweepConfig:

    path = Path(path)
    file = str(path)
    if path.is_dir():  # said "not found" of a directory that is there
        raise SpecError(f"sweep config {file} is a directory, not a file")
    if not path.is_file():
        raise SpecError(f"sweep config {file} not found")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:  # its problem when it has one, e.g. "key 'entries' given twice (again at line 3)"
        problem = getattr(exc, "problem", None)
        raise SpecError(f"{file} is not valid YAML" + (f": {problem}" if problem else "")) from None
    except UnicodeDecodeError as exc:  # was a traceback
        raise SpecError(f"{file} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{file}: expected a mapping at the top level")
    known = {
        "name",
        "hw",
        "entries",
        "backend",
        "sampler",
        "trials",
        "seed",
        "regression_threshold",
        "registered_model",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"{file}: unknown field {unknown[0]} (a sweep's fields: {', '.join(sorted(known))})")
    hw = _field(data, "hw", (list, str), file, [DEFAULT_HW])
    hw = [hw] if isinstance(hw, str) else hw
    if not hw:
        raise SpecError(f"{file}: field hw is empty")
    if len(set(map(str, hw))) < len(hw):
        raise SpecError(f"{file}: field hw names a hardware file twice")
    entries_raw = _field(data, "entries", list, file, required=True)
    if not entries_raw:
        raise SpecError(f"{file}: field entries is empty")
    entries: list[SweepEntry] = []
    keys: list[tuple[object, ...]] = []
    for i, raw in enumerate(entries_raw):
        where = f"entries[{i}]"
        if not isinstance(raw, dict) or "workload" not in raw:
            raise SpecError(f"{file}: field {where} needs a workload")
        extra = sorted(set(raw) - ENTRY_FIELDS)
        if extra:
            # `trials` in an entry was "unknown field entries[0].trials", without a word of where it goes
            shared = f"; {extra[0]} is the whole sweep's, at the top level" if extra[0] in known else ""
            fields = ", ".join(sorted(ENTRY_FIELDS))
            raise SpecError(f"{file}: unknown field {where}.{extra[0]} (an entry's fields: {fields}{shared})")
        shape = raw.get("shape") or {}
        if not isinstance(shape, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0 for k, v in shape.items()
        ):  # a key YAML reads as a number (`1: 128`) reached the spec as a keyword: a TypeError traceback
            sizes = (
                [k for k, v in shape.items() if isinstance(v, list) or ".." in str(v)]
                if isinstance(shape, dict)
                else []
            )
            raise SpecError(
                f"{file}: field {where}.shape must map dimension names to positive integers"
                + (  # `M: 128..384` or `M: [128, 256]`, as `axon tune --shape` takes them, said only this
                    f" ({where}.shape.{sizes[0]} is a range or list: a sweep entry tunes one shape; give an "
                    f"entry per shape, or tune the range with `axon tune --shape {sizes[0]}=LO..HI`)"
                    if sizes
                    else ""
                )
            )
        dtype = str(raw.get("dtype", "float32"))
        if dtype not in KERNEL_DTYPES:  # what `axon tune --dtype` takes (a float8 kernel fails every check)
            raise SpecError(f"{file}: field {where}.dtype must be one of {', '.join(KERNEL_DTYPES)}, got {dtype!r}")
        workload = str(raw["workload"])
        spec_file = resolve_workload(workload, str(path.resolve().parent)).rpartition(":")[0]
        if spec_file.endswith(".py") and not os.path.isfile(spec_file):
            raise SpecError(
                f"{file}: field {where}.workload: spec file {spec_file} not found "
                f"(a relative path is taken from the config file's directory)"
            )
        entry = SweepEntry(workload, str(raw.get("preset", "default")), tuple(sorted(shape.items())), dtype)
        # one task, one study: a repeat would be tuned once and counted once. The same spec file
        # written another way (`./specs.py:f` after `specs.py:f`) is the same task, tuned twice before
        same = os.path.realpath(spec_file) + ":" + workload.rpartition(":")[2] if spec_file else workload
        key = (same, entry.preset, entry.shape, entry.dtype)
        if key in keys:
            raise SpecError(f"{file}: field {where} repeats entries[{keys.index(key)}]")
        entries.append(entry)
        keys.append(key)
    sampler = _field(data, "sampler", str, file, "costmodel")
    if sampler not in SAMPLERS:
        raise SpecError(f"{file}: field sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    trials = _field(data, "trials", int, file, 32)
    if trials < 1:
        raise SpecError(f"{file}: field trials must be positive, got {trials}")
    seed = _field(data, "seed", int, file, 0)
    if not 0 <= seed < 2**32:
        raise SpecError(f"{file}: field seed must be in 0..{2**32 - 1}, got {seed}")
    backend = _field(data, "backend", str, file, "sim")
    if backend not in BACKENDS:
        raise SpecError(f"{file}: field backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    registered = _field(data, "registered_model", str, file, "axon-costmodel-{hw}")
    try:  # formatted once per hw after the last task: a bad template must not wait for the end
        model_name = registered.format(hw="trn1")  # the hardware file's name, as sweep.py formats it
    except (KeyError, IndexError, ValueError, AttributeError):
        raise SpecError(
            f"{file}: field registered_model may use only {{hw}} as a placeholder, got {registered!r}"
        ) from None
    if not model_name.strip() or "/" in model_name or ":" in model_name:  # MLflow's rule, met after every task
        raise SpecError(f"{file}: field registered_model must be a name without '/' or ':', got {registered!r}")
    name = _field(data, "name", str, file, path.stem)
    # it names the sweep's state file, and is quoted in the MLflow search for the previous sweep ("bob's":
    # an MLflow traceback before the first task, the sweep's run left RUNNING)
    if name.strip() in ("", ".", "..") or any(c in name for c in "/\\\0'\""):
        given = "" if "name" in data else " (the config file's name, as the config gives none)"
        raise SpecError(f"{file}: field name must be a name without '/', '\\' or quotes, got {name!r}{given}")
    threshold = float(_field(data, "regression_threshold", (int, float), file, 0.05))
    if not threshold >= 0:  # NaN too: no slowdown would ever be flagged
        raise SpecError(f"{file}: field regression_threshold must be a number >= 0, got {threshold}")
    return SweepConfig(
        name=name,
        hw=tuple(hw),
        entries=tuple(entries),
        backend=backend,
        sampler=sampler,
        trials=trials,
        seed=seed,
        regression_threshold=threshold,
        registered_model=registered,
        source=file,
    )


@dataclass(frozen=True)
class Change:
    key: str
    latency_ns: float | None
    previous_ns: float | None

    @property
    def ratio(self) -> float | None:
        if self.latency_ns is None or self.previous_ns is None:
            return None
        return self.latency_ns / self.previous_ns


def compare(
    current: dict[str, float | None], previous: dict[str, float | None], threshold: float
) -> tuple[list[Change], list[Change]]:
    """All changes against the previous sweep, and the regressions (slower by more than threshold)."""
    changes = [Change(k, v, previous.get(k)) for k, v in current.items()]
    regressions = [c for c in changes if c.ratio is not None and c.ratio > 1 + threshold]
    # a task that worked before and fails now is a regression too
    regressions += [c for c in changes if c.latency_ns is None and c.previous_ns is not None]
    return changes, regressions
