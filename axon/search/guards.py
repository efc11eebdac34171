"""Checks made before any tracing or lowering: a problem that cannot run here, a work directory,
--out or journal file that cannot be used. Each refuses in one line (a typed AxonError).

Resource guards, three figures, each estimated from the bound graph alone in microseconds: the problem's minimum
HBM bytes against the hardware file's HBM, the host memory the float64 reference and the emulator
would take for the numerics check, and the instructions (so the seconds and memory) the `sim`
backend would trace per trial. The estimates are coarse (within a few times); `--force` skips them.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from axon.errors import AxonError, BackendError, SpecError, StoreError
from axon.ir import Graph, flops, matmul_flops, min_bytes
from axon.lower.emit import HEADER
from axon.measure.neuron import NeuronBackend
from axon.measure.records import RecordDB
from axon.measure.stores import records_location
from axon.search.request import TuneRequest
from axon.search.variants import workload_graph
from axon.target import HardwareSpec
from axon.workdir import Workdir
from axon.workloads import Workload, get

GiB = 2**30
# the emulator traces about 2-4 x 10^4 instructions per second and keeps about 1 KB per traced
# instruction with its simulated timeline (measured on rmsnorm_matmul: 188k instructions, 6.2 s, 190 MB)
TRACE_PER_S = 2e4
TRACE_BYTES_PER_INSTRUCTION = 2048
MAX_TRIAL_S = 3600.0
HOST_FRACTION = 0.5  # of this machine's memory, the most one tuning may plan to take
NUMERICS_MAX_FLOPS = 4e9  # the numerics check runs at reduced sizes above this (as axon.search.api does)
NUMERICS_CAP = 512  # ... the first reduced size it tries: every dimension cut to at most this


@dataclass(frozen=True)
class Estimate:
    hbm_bytes: int
    host_bytes: int
    trace_instructions: float

    @property
    def trace_s(self) -> float:
        return self.trace_instructions / TRACE_PER_S


def host_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def evaluate_bytes(graph: Graph) -> int:
    """Bytes the float64 reference evaluator holds: every node's value at once (a bound)."""
    dims = graph.bindings
    return sum(8 * n.type.numel(dims) for n in graph.nodes if n.op not in ("const", "dimsize"))


def numerics_graph(graph: Graph) -> Graph:
    """The graph the numerics check executes: the same, or cut to NUMERICS_CAP per dimension."""
    if flops(graph) <= NUMERICS_MAX_FLOPS:
        return graph
    try:
        small = graph.bind(**{k: min(v, NUMERICS_CAP) for k, v in graph.bindings.items()})
        small.check_bound()
    except SpecError:  # a derived dimension that does not bind at the cut, a fixed slice past it (x[:, :640])
        return graph
    return small


def trace_instructions(graph: Graph) -> float:
    """Instructions the `sim` backend traces per trial, from tile counts: matmul tiles of 128x128x512,
    elementwise tiles of 128x512 per op, DMA tiles of 128x512 words, times 4 for the evacuations,
    transposes and loads that go with them; two partial traces of 1/16 and 2/16 of the top-level loop."""
    dims = graph.bindings
    matmul_tiles = matmul_flops(graph) / (2 * 128 * 128 * 512)
    elementwise = sum(n.type.numel(dims) for n in graph.nodes if n.op not in ("input", "const", "dimsize", "matmul"))
    total = 4 * (matmul_tiles + elementwise / (128 * 512) + min_bytes(graph) / (128 * 512 * 4))
    return total * 3 / 16 if total > 1e5 else total


def estimate(graph: Graph) -> Estimate:
    small = numerics_graph(graph)
    host = evaluate_bytes(small) + 2 * min_bytes(small)  # reference values + the emulator's inputs and outputs
    trace = trace_instructions(graph)
    return Estimate(min_bytes(graph), int(host + trace * TRACE_BYTES_PER_INSTRUCTION), trace)


def _gib(n: float) -> str:
    """Bytes in GiB, or in MiB, KiB or bytes below a tenth of the larger unit (a hardware file's 1000-byte
    HBM and a problem's 1 MiB were both "0.0 GiB", so one was said to be over the other).

    >>> _gib(11 * GiB), _gib(1_048_576), _gib(1000), _gib(50)
    ('11.0 GiB', '1.0 MiB', '1.0 KiB', '50 bytes')
    """
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size / 10:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} bytes"


# what a guard's refusal tells the command line; a sweep's entry has neither flag, and says its own
SHAPE_ADVICE = "use a smaller --shape (or --force)"
SWEEP_SHAPE_ADVICE = "give the entry a smaller shape (a sweep has no --shape or --force)"
# an unbound dimension's advice (`Graph.check_bound`, `Workload.graph`), told as an entry's fields
_FLAG_ADVICE = (
    (re.compile(r"bind with --shape (\w+)=\.\.\."), r"bind it in the entry's shape: {\1: ...}"),
    (re.compile(r"with --preset \("), "in the entry's preset field ("),
)


def sweep_advice(why: str) -> str:
    """A refusal's advice for a sweep entry, which has fields, not --shape, --preset or --force.

    >>> sweep_advice("graph f: unbound dimension 'M'; bind with --shape M=...")
    "graph f: unbound dimension 'M'; bind it in the entry's shape: {M: ...}"
    """
    why = why.replace(SHAPE_ADVICE, SWEEP_SHAPE_ADVICE)
    for flag, field in _FLAG_ADVICE:
        why = flag.sub(field, why)
    return why


def check_tune(graph: Graph, hw: HardwareSpec, what: str) -> Estimate:
    """SpecError when `graph` cannot be tuned on `hw` here (HBM, host memory, seconds per trial)."""
    est = estimate(graph)
    shape = _shape_text(graph)
    hbm = hw.memory.hbm_bytes
    if est.hbm_bytes > hbm:
        raise SpecError(
            f"{what} at {shape} needs {_gib(est.hbm_bytes)} of HBM for its inputs and outputs, "
            f"{hw.name} has {_gib(hbm)} per NeuronCore: {SHAPE_ADVICE}"
        )
    limit = HOST_FRACTION * host_memory()
    if est.host_bytes > limit:
        raise SpecError(
            f"{what} at {shape} needs about {_gib(est.host_bytes)} of host memory to emulate and check, "
            f"more than half of this machine's {_gib(host_memory())}: {SHAPE_ADVICE}"
        )
    if est.trace_s > MAX_TRIAL_S:
        raise SpecError(
            f"{what} at {shape}: one trial would trace about {est.trace_instructions:,.0f} instructions "
            f"(~{est.trace_s / 3600:,.1f} h at {TRACE_PER_S:,.0f}/s): {SHAPE_ADVICE}"
        )
    return est


# The most elements one array can have (numpy's index type): a tensor past it cannot be evaluated at all
MAX_ELEMENTS = 2**63 - 1


def _shape_text(graph: Graph) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(graph.bindings.items()))


def check_representable(graph: Graph, what: str) -> None:
    """SpecError when one of `graph`'s tensors has more elements than any array can hold, which no
    `--force` gets past: `check --force` at M=10^23 ended in numpy's "Maximum allowed dimension
    exceeded" (a traceback), and every trial of `tune --force` in an OverflowError."""
    dims = graph.bindings
    largest = max((n.type.numel(dims) for n in graph.nodes if n.op not in ("const", "dimsize")), default=0)
    if largest > MAX_ELEMENTS:
        raise SpecError(
            f"{what} at {_shape_text(graph)}: a tensor of {largest:.3g} elements, more than any array can hold "
            "(2^63 - 1)"
        )


def check_evaluate(graph: Graph, what: str) -> None:
    """SpecError when evaluating `graph` in float64 would take more than half of this machine's memory."""
    need = evaluate_bytes(graph)
    if need > HOST_FRACTION * host_memory():
        raise SpecError(
            f"{what} at {_shape_text(graph)}: evaluating it needs about {_gib(need)} of host memory, more than half "
            f"of this machine's {_gib(host_memory())}: {SHAPE_ADVICE}"
        )


def kernel_out_path(out: str | Path | None, workdir: Workdir, name: str, hw: str, khash: str) -> Path:
    """Where the best kernel goes: `out` (its directory must exist) or WORKDIR/kernels/<name>_<hw>_<hash>.py."""
    if not out:
        return workdir.kernels / f"{name}_{hw}_{khash[:8]}.py"
    path = Path(out)
    try:
        path.resolve()
    except RuntimeError:  # Python 3.11's symlink loop: it was a traceback when the kernel was written, after the tune
        raise StoreError(f"--out {out} is a symbolic link that leads back to itself: give another path") from None
    if path.is_dir():
        raise StoreError(f"--out {out} is a directory: give a file path, e.g. {path / (name + '.py')}")
    if path.exists() and not path.is_file():
        # the kernel is written beside and renamed over it: as root `--out /dev/null` replaced the device
        raise StoreError(f"--out {out} is not a regular file ({_file_kind(path)}): give a file path")
    if not path.parent.is_dir():
        raise StoreError(f"--out {out}: {no_directory(path.parent)}")
    if not os.access(path.parent, os.W_OK | os.X_OK) or path.exists() and not os.access(path, os.W_OK):
        # a read-only mount: found when the kernel was written, after the whole tune
        raise StoreError(f"--out {out} is not writable: give a path in a directory you can write")
    if path.is_file() and not _written_by_axon(path):  # `--out model.py`, the spec itself: it was overwritten
        raise StoreError(
            f"--out {out} exists and is not a kernel Axon wrote: give another path (it is not overwritten)"
        )
    return path


def check_family_out(out: Path | None) -> None:
    """StoreError when a kernel family's `--out` cannot be its directory (it is made, parents and all,
    when the family is written; an existing one is written into, as a rerun of the same command does)."""
    if out is None:
        return
    if out.exists() and not out.is_dir():
        kind = "a file" if out.is_file() else _file_kind(out)
        raise StoreError(f"--out {out} is {kind}, and a kernel family is written as a directory: give a directory path")
    existing = next(p for p in (out, *out.parents) if p.exists())  # where it is made, parents and all
    if not os.access(existing, os.W_OK | os.X_OK):  # a read-only mount was found after the whole tune
        raise StoreError(f"--out {out} is not writable: give a directory you can write")


def write_kernel_file(path: Path, source: str) -> None:
    """`source` as `path`, whole or not at all: written in place, a disk that filled up mid-write left
    an empty file (an earlier kernel there lost), which the same command's `--out` then refused as
    not a kernel Axon wrote. A symlink's target is written, as in place."""
    target = path.resolve()
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(source)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _file_kind(path: Path) -> str:
    mode = path.stat().st_mode
    kinds = {stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a named pipe"}
    return next((kind for is_kind, kind in kinds.items() if is_kind(mode)), "a socket or other special file")


def _written_by_axon(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(HEADER)) == HEADER.encode()


# Optuna's journal operation codes (optuna.storages.journal._storage.JournalOperation, 0-10)
JOURNAL_OPS = frozenset(range(11))


def no_directory(path: Path) -> str:
    """Why `path`, not a directory, cannot hold a file: said "directory X does not exist" of a file too."""
    return f"{path} is a file, not a directory" if path.exists() else f"directory {path} does not exist"


def check_journal(path: Path, settle_s: float = 0.2) -> None:
    """StoreError when the journal file is not one Optuna record per line (cut off, overwritten, binary).

    A last line without its newline may be another worker's write in flight: it is read again after
    `settle_s` before it counts as cut off.
    """
    if path.is_dir():
        raise StoreError(f"Optuna journal {path} is a directory, not a file")
    if not path.exists():
        return
    if not path.is_file():  # reading a pipe to check it waited for a writer for ever
        raise StoreError(f"Optuna journal {path} is not a regular file ({_file_kind(path)})")
    lines = path.read_bytes().splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        time.sleep(settle_s)
        lines = path.read_bytes().splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        if number == len(lines) and not line.endswith(b"\n"):
            raise StoreError(
                f"Optuna journal {path} is corrupt (its last line, {number}, was cut off mid-write): remove "
                f"that line to keep its studies (sed -i '$d' {path}), or move the file aside to start "
                f"afresh; records.db keeps every measurement either way"
            )
        try:
            record = json.loads(line)
            ok = isinstance(record, dict) and record.get("op_code") in JOURNAL_OPS
        except (UnicodeDecodeError, ValueError):
            ok = False
        if not ok:
            raise StoreError(corrupt_journal(path, f"line {number} is not a journal record"))


def corrupt_journal(path: Path | str, what: str) -> str:
    return (
        f"Optuna journal {path} is corrupt ({what}): move it aside (mv {path} {path}.bad) to start its studies "
        f"afresh; records.db keeps every measurement, so no kernel is measured again"
    )


def preflight(request: TuneRequest) -> tuple[Workload, Graph]:
    """Every check a tuning run makes before its first trace: the spec traces at its shape, --out
    and the journal are usable, and (unless `force`) the problem fits the hardware's HBM and this
    machine's memory and time. Returns the workload and its graph."""
    w = get(request.workload)
    graph = workload_graph(w, request.preset, request.dtype, request.shape)
    kernel_out_path(request.out, request.workdir, w.kernel_name, request.hw.name, "0" * 8)
    if request.storage is None or "://" not in request.storage:
        check_journal(Path(request.storage) if request.storage else request.workdir.journal)
    check_records(records_location(request.records, request.storage, request.workdir.records))
    check_representable(graph, w.name)
    if not request.force:
        check_tune(graph, request.hw, w.name)
    return w, graph


def check_records(where: str | Path) -> None:
    """StoreError when an existing SQLite records database is corrupt, locked or of another schema:
    before the variants are discovered and screened (seconds), not after."""
    if isinstance(where, Path) and where.exists():
        RecordDB(where).close()


def preflight_sweep(config: Any, workdir: Workdir) -> None:
    """`preflight` for every task of a `SweepConfig`, the error naming the config file and the entry."""
    check_journal(workdir.journal)
    if config.backend == "neuron" and (
        reason := NeuronBackend.available()
    ):  # as `tune --backend neuron`: before any task
        raise BackendError(f"{config.source}: backend 'neuron' cannot run here: {reason}; use backend: sim")
    machines: dict[str, str] = {}
    for hw, entry in config.tasks():
        try:
            request = TuneRequest.make(
                config.workload(entry),
                shape=entry.dims,
                preset=entry.preset,
                dtype=entry.dtype,
                hw=config.hw_file(hw),
                workdir=workdir,
            )
            preflight(request)
        except AxonError as exc:
            raise type(exc)(f"{config.source}: entry {entry.key(hw)}: {sweep_advice(str(exc))}") from None
        # tasks are keyed by the machine's name: a second file of the same machine was skipped as done
        other = machines.setdefault(request.hw.name, hw)
        if other != hw:
            raise SpecError(
                f"{config.source}: field hw: {other!r} and {hw!r} are both hardware {request.hw.name!r} "
                f"(a sweep keys its tasks by that name): give one of them another name"
            )
