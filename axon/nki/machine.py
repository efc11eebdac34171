"""The running kernel: allocation, liveness, loops, hardware rules and the instruction record.

One `Machine` exists per `run`/`trace` call; `nki.language` and `nki.isa` find it through
`active()`. Every instruction goes through `Machine.issue`, which checks the ISA table's operand
rules, the poison rule and records the `Instr`; the caller computes numbers only in execute mode.
What each instruction computes is not here (see `instructions.py` and `axon.target.isa`).
"""

from __future__ import annotations

import contextvars
import os
import sys
from typing import Any, Iterator

import numpy as np

from axon.errors import NKIError
from axon.nki.memory import Allocation, View
from axon.nki.trace import Access, Alloc, Instr, Loop, Trace
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA, ISA_LIMITS

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The one piece of process state: which Machine the nl/nisa calls of this thread belong to.
_ACTIVE: contextvars.ContextVar["Machine | None"] = contextvars.ContextVar("axon_nki_machine", default=None)


def active() -> "Machine":
    m = _ACTIVE.get()
    if m is None:
        raise NKIError("NKI calls must run inside a kernel: use axon.nki.run(kernel, ...) or axon.nki.trace(...)")
    return m


def maybe_active() -> "Machine | None":
    return _ACTIVE.get()


def kernel_site() -> tuple[str, int]:
    """(file, line) of the innermost frame outside the emulator: the kernel line being executed."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back
    if f is None:  # pragma: no cover - only when called from emulator-internal code
        return ("<emulator>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def _resolve(hw: HardwareSpec, path: str) -> int:
    if path in ISA_LIMITS:
        return ISA_LIMITS[path]
    obj: Any = hw
    for part in path.split("."):
        obj = getattr(obj, part)
    return int(obj)


class Machine:
    """State of one kernel execution (execute) or tracing (trace) on one `HardwareSpec`."""

    def __init__(self, hw: HardwareSpec, execute: bool, kernel: str = "kernel", file: str = "") -> None:
        self.hw = hw
        self.execute = execute
        self.kernel = kernel
        self.file = file
        self.instrs: list[Instr] = []
        self.allocs: list[Alloc] = []
        self.loops: list[Loop] = []
        self.loop_stack: tuple[tuple[int, str, int], ...] = ()
        self._loop_ids: dict[tuple[str, int, int | None], int] = {}
        self._iteration_allocs: list[list[int]] = []
        self.live: dict[int, tuple[str, int]] = {}  # alloc id -> (kind, bytes per partition charged)
        self.live_bytes = {"sbuf": 0, "psum": 0, "hbm": 0}
        self.peak_bytes = {"sbuf": 0, "psum": 0, "hbm": 0}
        self.loop_reduce_acc: dict[Any, View] = {}
        self.shared_tensors: dict[Any, View] = {}
        self._limits: dict[str, int] = {}
        self.program_ids: tuple[int, ...] = ()
        self.num_programs: tuple[int, ...] = ()
        self._token: contextvars.Token[Machine | None] | None = None
        self.capacity = {"sbuf": hw.memory.sbuf_bytes_per_partition, "psum": hw.memory.psum_bytes_per_partition}
        # Trace mode only: top-level loops run at most this many iterations, or as many as
        # `loop_limit(trip_count)` says (their Loop records keep the true trip count); `axon.measure`
        # extrapolates the timing of the rest. None: run all.
        self.loop_limit: Any = None

    # ---- activation ----------------------------------------------------------------------------
    def __enter__(self) -> "Machine":
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._token is not None
        _ACTIVE.reset(self._token)
        for a in list(self.live):
            self.free(a)

    def fail(self, rule: str, detail: str, site: tuple[str, int] | None = None) -> NKIError:
        file, line = site or kernel_site()
        return NKIError(f"{os.path.basename(file)}:{line}: {rule}: {detail} (kernel {self.kernel}, {file}:{line})")

    # ---- memory --------------------------------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype: np.dtype, kind: str, name: str = "",
                 par_axis: int | None = 0, temp: bool = False) -> Allocation:
        """A new tensor; checks the partition limit, the PSUM bank size and live capacity."""
        site = kernel_site()
        shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise self.fail("shape", f"tensor shape {list(shape)} must be positive", site)
        if kind == "hbm":
            par_axis = None
        elif par_axis is not None and not shape:
            raise self.fail("shape", "an on-chip tile needs a partition axis", site)
        alloc = Allocation(len(self.allocs), kind, name or f"t{len(self.allocs)}", shape, dtype, par_axis, self.execute)
        alloc.temp = temp
        charged = alloc.free_bytes
        if kind != "hbm":
            pmax = self.hw.memory.partitions
            if shape[par_axis] > pmax:  # type: ignore[index]
                raise self.fail("partition axis > 128", f"tile shape {list(shape)} puts {shape[par_axis]} "  # type: ignore[index]
                                f"on the partition axis (at most {pmax} partitions)", site)
            if kind == "psum":
                bank = self.hw.memory.psum_bank_bytes
                tile = dtype.itemsize
                for a in range(par_axis + 1, len(shape)):  # type: ignore[operator]
                    tile *= shape[a]
                if tile > bank:
                    raise self.fail("PSUM tile larger than a bank", f"tile {list(shape)} {dtype.name} needs {tile} "
                                    f"bytes per partition; a PSUM bank holds {bank}", site)
                # The PSUM allocator hands out whole banks (one accumulation group each).
                tiles = charged // tile
                charged = tiles * bank
            used = self.live_bytes[kind] + charged
            if used > self.capacity[kind]:
                raise self.fail(f"{kind.upper()} capacity exceeded",
                                f"allocating {list(shape)} {dtype.name} brings live {kind.upper()} use to {used} bytes "
                                f"per partition, over the {self.capacity[kind]} of {self.hw.name}", site)
        self.live[alloc.id] = (kind, charged)
        self.live_bytes[kind] += charged
        self.peak_bytes[kind] = max(self.peak_bytes[kind], self.live_bytes[kind])
        alloc.release = self.free
        if self._iteration_allocs:
            self._iteration_allocs[-1].append(alloc.id)
        parts = 1 if par_axis is None else shape[par_axis]
        self.allocs.append(Alloc(alloc.id, kind, alloc.name, shape, dtype.name, parts, alloc.free_bytes,
                                 f"{os.path.basename(site[0])}:{site[1]}", len(self.loop_stack)))
        return alloc

    def free(self, alloc_id: int) -> None:
        entry = self.live.pop(alloc_id, None)
        if entry is not None:
            self.live_bytes[entry[0]] -= entry[1]

    # ---- loops ---------------------------------------------------------------------------------
    def loop(self, kind: str, r: range) -> Iterator[int]:
        """Iterate `r` as an NKI loop: record it, and end the life of each iteration's tiles."""
        file, line = kernel_site()
        parent = self.loop_stack[-1][0] if self.loop_stack else None
        key = (file, line, parent)
        lid = self._loop_ids.get(key)
        if lid is None:
            lid = len(self.loops)
            self._loop_ids[key] = lid
            self.loops.append(Loop(lid, kind, len(r), line, parent))
        outer = self.loop_stack
        if self.loop_limit is not None and not outer and not self.execute:
            keep = self.loop_limit(len(r)) if callable(self.loop_limit) else self.loop_limit
            r = r[: max(1, keep)]
        try:
            for it, value in enumerate(r):
                self.loop_stack = outer + ((lid, kind, it),)
                self._iteration_allocs.append([])
                yield value
                for a in self._iteration_allocs.pop():
                    self.free(a)
        finally:
            self.loop_stack = outer
            if len(self._iteration_allocs) > len(outer):
                for a in self._iteration_allocs.pop():
                    self.free(a)

    # ---- instructions --------------------------------------------------------------------------
    def access(self, v: View) -> Access:
        al = v.alloc
        pa = al.par_axis
        lo = hi = 0
        plo, phi = 0, 1
        stride = 0
        touched = 1
        for a, (st, sp, sz) in enumerate(zip(v.starts, v.steps, v.sizes)):
            if a == pa:
                plo, phi = st, st + sp * (sz - 1) + 1
                continue
            s = al.strides[a]
            lo += st * s
            hi += (st + sp * (sz - 1)) * s
            touched *= sz
            if sz > 1:
                stride = sp * s
        isz = al.dtype.itemsize
        parts = phi - plo if pa is not None else 1
        return Access(al.id, al.kind, plo, phi, lo * isz, (hi + 1) * isz, touched * isz * parts,
                      (stride or 1) * isz)

    def check_operand(self, opcode: str, role: str, v: View, engine: str, site: tuple[str, int]) -> None:
        """The ISA table's rules for one operand: buffer, engine access, partition and free limits."""
        rule = ISA[opcode].operand(role)
        kind = v.alloc.kind
        if kind not in rule.buffers:
            want = " or ".join(sorted(b.upper() for b in rule.buffers))
            raise self.fail(f"{opcode} {role} must be in {want}", f"{role} {v!r} is in {kind.upper()}", site)
        if engine == "gpsimd" and kind == "psum":
            raise self.fail("GpSimd cannot access PSUM", f"{opcode} on the GpSimd engine touches {role} {v!r}", site)
        if not v.in_bounds():
            raise self.fail("out of bounds", f"{opcode} {role} indexes outside tensor {v.alloc.name} "
                            f"{list(v.alloc.shape)} (mask it or slice it)", site)
        if kind == "hbm":
            return
        if not v.partition_first:
            raise self.fail("partition axis first", f"{opcode} {role} {v!r} must have the partition axis first", site)
        if rule.max_partitions is not None and v.partitions > self.limit(rule.max_partitions):
            raise self.fail("partition axis > 128", f"{opcode} {role} spans {v.partitions} partitions", site)
        if rule.max_free is not None:
            limit = self.limit(rule.max_free)
            if v.free_size > limit:
                name = rule.rule or f"{opcode} {role} free size"
                raise self.fail(f"{name} > {limit}", f"{opcode} {role} {v!r} has free size {v.free_size}", site)

    def limit(self, path: str) -> int:
        value = self._limits.get(path)
        if value is None:
            value = self._limits[path] = _resolve(self.hw, path)
        return value

    def check_readable(self, v: View, role: str, opcode: str, site: tuple[str, int]) -> None:
        """Poison: reading memory no instruction wrote is an error, never a silent zero or NaN."""
        al = v.alloc
        if al.written is not None:
            if not al.written[v.np_index()].all():
                raise self.fail("read of never-written memory", f"{opcode} reads {role} {v!r}, "
                                "which holds elements no instruction has written", site)
        elif not al.ever_written:
            raise self.fail("read of never-written memory", f"{opcode} reads {role} {v!r} before anything wrote it", site)

    def issue(self, opcode: str, engine: str, reads: list[tuple[str, View]], writes: list[tuple[str, View]],
              main: View, attrs: tuple[tuple[str, Any], ...] = (), site: tuple[str, int] | None = None,
              read_dst: bool = False, checked: bool = False) -> int:
        """Check and record one instruction; returns its index. Numbers are the caller's job."""
        site = site or kernel_site()
        row = ISA[opcode]
        if engine not in row.engines:
            raise self.fail("engine", f"{opcode} cannot run on the {engine} engine (allowed: {', '.join(row.engines)})", site)
        if not checked:  # the caller has already checked operands it had to check early
            for role, v in reads:
                self.check_operand(opcode, role, v, engine, site)
            for role, v in writes:
                self.check_operand(opcode, role, v, engine, site)
        for role, v in reads:
            self.check_readable(v, role, opcode, site)
        if read_dst:
            for role, v in writes:
                self.check_readable(v, role, opcode, site)
        index = len(self.instrs)
        racc = tuple(self.access(v) for _, v in reads)
        wacc = tuple(self.access(v) for _, v in writes)
        if read_dst:
            racc = racc + wacc
        self.instrs.append(Instr(index, opcode, engine, main.partitions, main.free_size, main.dtype.name,
                                 racc, wacc, site[1], self.loop_stack, attrs))
        for _, v in writes:
            al = v.alloc
            al.ever_written = True
            al.producer = index
            al.last_write = v
            if al.written is not None:
                al.written[v.np_index()] = True
        return index

    def retarget_last(self, temp: View, dst: View, accumulate: bool) -> None:
        """Legacy `dst[...] = op(...)` / `dst += nc_matmul(...)`: the instruction that produced the
        temporary writes `dst` directly (as the NKI compiler does), instead of a copy."""
        ins = self.instrs[-1]
        new_w = tuple(self.access(dst) if a.alloc == temp.alloc.id else a for a in ins.writes)
        reads = ins.reads + ((self.access(dst),) if accumulate else ())
        attrs = tuple(kv for kv in ins.attrs if not (accumulate and kv[0] == "accumulate"))
        attrs += (("accumulate", True),) if accumulate else ()
        self.instrs[-1] = Instr(ins.index, ins.opcode, ins.engine, ins.partitions, ins.free_size, ins.dtype,
                                reads, new_w, ins.line, ins.loops, attrs)
        dst.alloc.ever_written = True
        dst.alloc.producer = ins.index
        if dst.alloc.written is not None:
            dst.alloc.written[dst.np_index()] = True

    def to_trace(self, outputs: tuple[int, ...] = ()) -> Trace:
        return Trace(self.kernel, self.file, self.hw.name, tuple(self.instrs), tuple(self.allocs), tuple(self.loops),
                     outputs, {"mode": "execute" if self.execute else "trace",
                               "peak_sbuf_bytes_per_partition": self.peak_bytes["sbuf"],
                               "peak_psum_bytes_per_partition": self.peak_bytes["psum"],
                               "loop_limit": self.loop_limit if isinstance(self.loop_limit, int) else None})
