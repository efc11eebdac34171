"""`HardwareSpec`: one NeuronCore as validated, frozen data, loaded from `axon/target/hw/*.yaml`.

The schema is the dataclasses below: every field is required, numbers must be positive (or
non-negative where zero is meaningful), and an error names the field and the file. Nothing here
models timing; the simulator reads these numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from axon.errors import HardwareError
from axon.yamlfile import load_yaml

# the built-in hardware files: package data (pyproject.toml), so a wheel carries them; the
# repository's documented `configs/hw/` links here
CONFIG_DIR = Path(__file__).resolve().parent / "hw"
ENGINES = ("tensor", "vector", "scalar", "gpsimd")
# the hardware file every command and the Python API use when none is named (the one place it is spelled)
DEFAULT_HW = "trn1"


@dataclass(frozen=True)
class Engine:
    clock_ghz: float
    lanes: int

    def cycles_to_ns(self, cycles: float) -> float:
        return cycles / self.clock_ghz


@dataclass(frozen=True)
class Engines:
    tensor: Engine
    vector: Engine
    scalar: Engine
    gpsimd: Engine

    def __getitem__(self, name: str) -> Engine:
        if name not in ENGINES:
            raise KeyError(name)
        return getattr(self, name)


@dataclass(frozen=True)
class TensorEngine:
    rows: int
    stationary_fmax: int
    moving_fmax: int
    fp32_slowdown: float
    load_stationary_speedup: float
    turnaround_cycles: int
    peak_bf16_tflops: float


@dataclass(frozen=True)
class Memory:
    partitions: int
    sbuf_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    hbm_bytes: int
    hbm_bandwidth_gbps: float
    vector_sbuf_fmax: int
    vector_psum_fmax: int
    access_overhead_cycles: int
    stride_penalty_bytes: int
    stride_penalty_factor: float
    loop_tile_buffers: int  # rotating buffers of a tile allocated in a loop body (timing model)
    compiler_sbuf_fraction: float  # share of SBUF the compiler's allocation keeps tiles in (residency model)

    @property
    def psum_bank_bytes(self) -> int:
        """Bytes per partition of one PSUM bank (2 KiB: 512 fp32)."""
        return self.psum_bytes_per_partition // self.psum_banks

    @property
    def sbuf_bytes(self) -> int:
        return self.sbuf_bytes_per_partition * self.partitions


@dataclass(frozen=True)
class DMA:
    engines: int
    queues_per_engine: int
    bytes_per_ns_per_engine: float
    fixed_cost_ns: float
    partitions_per_engine: int
    transpose_bandwidth_factor: float
    sbuf_to_sbuf_bandwidth_factor: float
    chunk_overhead_ns: float  # per descriptor (contiguous chunk) cost on the engine moving it


@dataclass(frozen=True)
class Costs:
    min_ii_cycles: int
    static_overhead_cycles: int
    semaphore_latency_ns: float
    launch_overhead_ns: float
    gpsimd_op_base_cycles: int
    dependent_scalar_ns: float
    reciprocal_vector_factor: float
    scalar_fp32_factor: float  # ScalarE cycles per fp32 element (1 per bf16/fp16 element)
    tensor_tensor_factor: float  # VectorE cycles per element of a tensor_tensor off the fast path
    bn_aggr_factor: float
    gpsimd_rsqrt_factor: float


@dataclass(frozen=True)
class Ports:
    vector_gpsimd_share_sbuf: bool
    vector_scalar_share_psum: bool
    vector_perf_mode_factor: float


@dataclass(frozen=True)
class HardwareSpec:
    """A NeuronCore. `load_hw("trn1")` or `load_hw("path/to/file.yaml")`.

    >>> from axon.target import load_hw
    >>> hw = load_hw("trn1")
    >>> hw.memory.partitions, hw.memory.psum_bank_bytes, hw.engines.tensor.clock_ghz
    (128, 2048, 2.8)
    """

    name: str
    generation: int
    engines: Engines
    tensor_engine: TensorEngine
    memory: Memory
    dma: DMA
    costs: Costs
    ports: Ports
    source: str = ""  # the file it was loaded from
    file_hash: str = ""  # sha256 of the file's bytes (first 16 hex digits), for records

    @property
    def peak_matmul_flops_per_s(self) -> float:
        t = self.engines.tensor
        return 2 * self.tensor_engine.rows * t.lanes * t.clock_ghz * 1e9

    @property
    def hbm_bytes_per_ns(self) -> float:
        return self.memory.hbm_bandwidth_gbps  # GB/s == bytes/ns


_ZERO_OK = {
    "generation",
    "static_overhead_cycles",
    "semaphore_latency_ns",
    "launch_overhead_ns",
    "turnaround_cycles",
    "access_overhead_cycles",
    "gpsimd_op_base_cycles",
}


def _build(cls: type[Any], data: Any, where: str, file: str) -> Any:
    if not isinstance(data, Mapping):
        raise HardwareError(f"{file}: field {where or 'top level'} must be a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    required = [f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    for f in required:
        path = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            raise HardwareError(f"{file}: missing field {path}")
        values[f.name] = _value(hints[f.name], data[f.name], path, file, f.name)
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        path = f"{where}.{unknown[0]}" if where else unknown[0]
        raise HardwareError(f"{file}: unknown field {path}")
    return cls(**values)


def _value(tp: Any, raw: Any, path: str, file: str, name: str) -> Any:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, raw, path, file)
    if tp is bool:
        if not isinstance(raw, bool):
            raise HardwareError(f"{file}: field {path} must be true or false, got {raw!r}")
        return raw
    if tp is str:
        if not isinstance(raw, str) or not raw:
            raise HardwareError(f"{file}: field {path} must be a non-empty string, got {raw!r}")
        return raw
    if tp in (int, float):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise HardwareError(f"{file}: field {path} must be a number, got {raw!r}")
        if not math.isfinite(raw):  # .nan / .inf: int() of it was a traceback, a NaN bandwidth a 0.0 us roofline
            raise HardwareError(f"{file}: field {path} must be a finite number, got {raw!r}")
        if tp is int and (float(raw) != int(raw)):
            raise HardwareError(f"{file}: field {path} must be a whole number, got {raw!r}")
        if raw < 0 or (raw == 0 and name not in _ZERO_OK):
            raise HardwareError(f"{file}: field {path} must be positive, got {raw!r}")
        return tp(raw)
    raise HardwareError(f"{file}: field {path} has an unsupported type")  # pragma: no cover


def _check(hw: HardwareSpec, file: str) -> None:
    # the name is in file names (kernels, families, cost models) and registered model names: a path in it
    # ("x/../../../escaped") wrote a kernel outside the working directory
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", hw.name) or ".." in hw.name:
        raise HardwareError(
            f"{file}: field name must be a machine name (letters, digits, '_', '-', '.'), got {hw.name!r}"
        )
    m = hw.memory
    if m.psum_bytes_per_partition % m.psum_banks:
        raise HardwareError(f"{file}: field memory.psum_bytes_per_partition must divide into memory.psum_banks banks")
    if m.partitions > 128 * 8 or hw.tensor_engine.rows > m.partitions:
        raise HardwareError(f"{file}: field tensor_engine.rows exceeds memory.partitions")


# parsed hardware files by (path as named, resolved path, content hash): `source` is the path as named
_LOADED: dict[tuple[str, str, str], HardwareSpec] = {}


def load_hw(name_or_path: str | os.PathLike[str] = DEFAULT_HW) -> HardwareSpec:
    """A `HardwareSpec` from a built-in name (`trn1`) or a YAML path; HardwareError names the field.

    The repository path of a built-in file (`configs/hw/trn1.yaml`, relative) names that file
    from any working directory, as it does in a checkout, unless such a file exists there.
    A file is parsed once per process and content: a repeated load returns the same (immutable)
    spec, and an edited file is parsed again.

    >>> load_hw() is load_hw(DEFAULT_HW)
    True
    """
    text = str(name_or_path)
    # a name with a suffix (specs.py, trn1.json) is a path too: it was looked up as .../hw/specs.py.yaml
    named_file = text.endswith((".yaml", ".yml")) or os.sep in text or Path(text).suffix != ""
    path = Path(text) if named_file else CONFIG_DIR / f"{text}.yaml"
    if not path.is_file() and path.parts == ("configs", "hw", path.name) and (CONFIG_DIR / path.name).is_file():
        path = CONFIG_DIR / path.name
    if Path(text).is_dir():  # it said ".../axon/target/hw/DIR.yaml not found"
        raise HardwareError(f"hardware file {text} is a directory: give a YAML file such as configs/hw/trn1.yaml")
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
        raise HardwareError(f"hardware file {path} not found (built-in: {known})")
    raw_bytes = path.read_bytes()
    digest = hashlib.sha256(raw_bytes).hexdigest()[:16]
    key = (str(path), str(path.resolve()), digest)
    cached = _LOADED.get(key)
    if cached is None:
        cached = _LOADED[key] = _parse(path, raw_bytes, digest)
    return cached


def _parse(path: Path, raw_bytes: bytes, digest: str) -> HardwareSpec:
    try:
        data = load_yaml(raw_bytes)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)  # e.g. "key 'generation' given twice (again at line 8)"
        raise HardwareError(f"{path}:{line} is not valid YAML" + (f": {problem}" if problem else "")) from None
    hw = _build(HardwareSpec, data, "", str(path))
    _check(hw, str(path))
    return dataclasses.replace(hw, source=str(path), file_hash=digest)


def builtin_hw() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
