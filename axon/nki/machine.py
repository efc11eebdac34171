"""The running kernel: allocation, liveness, loops, hardware rules and the instruction record.

One `Machine` exists per `run`/`trace` call; `nki.language` and `nki.isa` find it through
`active()`. Every instruction goes through `Machine.issue`, which checks the ISA table's operand
rules, the poison rule and records the `Instr`; the caller computes numbers only in execute mode.
What each instruction computes is not here (see `instructions.py` and `axon.target.isa`).
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from axon.errors import NKIError
from axon.nki.allocation import Allocation
from axon.nki.carried import MachineCarried, Window
from axon.nki.context import _ACTIVE, AutoEngine, kernel_site
from axon.nki.machine_memory import MachineMemory
from axon.nki.memory import View
from axon.nki.operands import MachineOperands
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA
from axon.target.trace import AUTO_ENGINE, Access, Alloc, Instr, Loop, Trace

_DTYPE_NAMES: dict[Any, str] = {}  # dtype -> name (np.dtype.name is slow); a cache, not state


class LoopVar(int):
    """A loop's iteration value that remembers its loop (for `nl.loop_reduce(loop_indices=...)`);
    arithmetic on it gives plain ints."""

    loop_id: int

    def __new__(cls, value: int, loop_id: int) -> LoopVar:
        v = super().__new__(cls, value)
        v.loop_id = loop_id
        return v


class Machine(MachineMemory, MachineOperands, MachineCarried):
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
        # On-chip tensors not yet garbage: alloc id -> (allocation (weak), bytes per partition charged).
        self.live: dict[int, tuple[Any, int]] = {}
        self._block_allocs: list[Allocation] = []  # tensors with block dimensions, charged per block
        # Spans of dead tiles: (first access, last access + 1, kind, bytes per partition, name, shape).
        self._ended: list[tuple[int, int, str, int, str, tuple[int, ...]]] = []
        self.peak_bytes = {"sbuf": 0, "psum": 0, "hbm": 0}
        self.loop_reduce_acc: dict[Any, View] = {}
        self.indexed_vars: set[int] = set()  # nl.arange variables some index expression used
        self._block_ids: dict[tuple[int, tuple[int, ...]], int] = {}  # (alloc, block) -> trace buffer id
        self.shared_tensors: dict[Any, View] = {}
        self._limits: dict[str, int] = {}
        self._accesses: dict[tuple[Any, ...], Access] = {}
        self.program_ids: tuple[int, ...] = ()
        self.num_programs: tuple[int, ...] = ()
        self._token: contextvars.Token[Machine | None] | None = None
        self.capacity = {"sbuf": hw.memory.sbuf_bytes_per_partition, "psum": hw.memory.psum_bytes_per_partition}
        # Trace mode only: top-level loops run at most this many iterations, or as many as
        # `loop_limit(trip_count)` says (their Loop records keep the true trip count); `axon.measure`
        # extrapolates the timing of the rest. None: run all.
        self.loop_limit: Any = None
        # (loop id, iteration, instructions, allocs, loops) so far at the end of each top-level iteration
        self.iteration_ends: list[tuple[int, int, int, int, int]] = []
        self.clock = 0  # ticks as each affine loop and iteration begins (execute mode: `carried`)
        self.windows: tuple[Window, ...] = ()
        self.pending_carried = None
        self.independent_iterations = True  # affine_range iterations must not depend on each other

    # ---- activation ----------------------------------------------------------------------------
    def __enter__(self) -> Machine:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._token is not None
        _ACTIVE.reset(self._token)
        self.live.clear()

    def fail(self, rule: str, detail: str, site: tuple[str, int] | None = None) -> NKIError:
        file, line = site or kernel_site()
        return NKIError(f"{os.path.basename(file)}:{line}: {rule}: {detail} (kernel {self.kernel}, {file}:{line})")

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
        windows = self.windows
        carried = kind == "affine" and self.execute and self.independent_iterations
        window = self.begin_affine((file, line), r) if carried else None
        try:
            for it, value in enumerate(r):
                self.loop_stack = outer + ((lid, kind, it),)
                if window is not None:
                    self.next_iteration(windows, window)
                yield LoopVar(value, lid)
                if window is not None:
                    self.settle_carried()
                if not outer:
                    self.iteration_ends.append((lid, it, len(self.instrs), len(self.allocs), len(self.loops)))
        finally:
            self.loop_stack = outer
            self.windows = windows

    # ---- instructions --------------------------------------------------------------------------
    def issue(
        self,
        opcode: str,
        engine: str,
        reads: list[tuple[str, View]],
        writes: list[tuple[str, View]],
        main: View,
        attrs: tuple[tuple[str, Any], ...] = (),
        site: tuple[str, int] | None = None,
        read_dst: bool = False,
        checked: bool = False,
    ) -> int:
        """Check and record one instruction; returns its index. Numbers are the caller's job."""
        site = site or kernel_site()
        row = ISA[opcode]
        if engine not in row.engines:
            raise self.fail(
                "engine", f"{opcode} cannot run on the {engine} engine (allowed: {', '.join(row.engines)})", site
            )
        if isinstance(engine, AutoEngine):
            engine, attrs = str(engine), attrs + (AUTO_ENGINE,)
        if not checked:  # the caller has already checked operands it had to check early
            for role, v in reads:
                self.check_operand(opcode, role, v, engine, site)
            for role, v in writes:
                self.check_operand(opcode, role, v, engine, site)
        undefined = None
        for role, v in reads + writes if read_dst else reads:
            al = v.alloc
            if al.written is None and (al._root or al).ever_written:
                continue  # what `check_readable` says of it: all written (trace mode)
            mask = self.check_readable(v, role, opcode, site)
            if mask is not None:
                undefined = (undefined or []) + [(role, v, mask)]
        if self.windows:
            self.check_carried(opcode, attrs, reads, writes, site)
        index = len(self.instrs)
        for ops in (reads, writes):
            for _, v in ops:
                al = v.alloc
                if al.kind != "hbm":
                    if al.blocks is not None:
                        self.touch_blocks(al, v, index)
                    else:
                        al = al._root or al
                        if al.first < 0:
                            al.first = index
                        al.last = index
        access = self.access
        racc = tuple([access(v) for _, v in reads])
        wacc = tuple([access(v) for _, v in writes])
        if read_dst:
            racc = racc + wacc
        dt = main.alloc.dtype
        name = _DTYPE_NAMES.get(dt)
        if name is None:
            name = _DTYPE_NAMES[dt] = dt.name
        self.instrs.append(
            Instr(
                index,
                opcode,
                engine,
                main.partitions,
                main.free_size,
                name,
                racc,
                wacc,
                site[1],
                self.loop_stack,
                attrs,
            )
        )
        for _, v in writes:
            defined: Any = True
            if undefined is not None:  # (rare) data computed from never-written memory
                full = [(r, u, None) for r, u in reads if not any(u is w for _, w, _ in undefined)]
                defined = self._defined(opcode, attrs, full + undefined, v)
                if v.alloc.kind == "hbm" and (defined is False or not np.all(defined)):
                    role, src, _ = undefined[0]
                    raise self.fail(
                        "read of never-written memory",
                        f"{opcode} writes data computed from never-written elements of {role} {src!r} "
                        f"into HBM tensor {v.alloc.name}",
                        site,
                    )
            al = v.alloc._root or v.alloc
            al.ever_written = True
            al.producer = index
            if al.temp:  # the box a legacy result tile got (an alloc-free copy: no reference cycle)
                al.last_write = View(None, v.starts, v.steps, v.sizes, v.kept)  # type: ignore[arg-type]
            if v.alloc.written is not None:
                v.alloc.written[v.np_index()] = defined
                if self.windows:
                    self.stamp(v)
        return index

    def retarget_last(self, temp: View, dst: View, accumulate: bool) -> None:
        """Legacy `dst[...] = op(...)` / `dst += nc_matmul(...)`: the instruction that produced the
        temporary writes `dst` directly (as the NKI compiler does), instead of a copy."""
        if self.pending_carried is not None:
            self.settle_carried(dst)
        ins = self.instrs[-1]
        new_w = tuple(self.access(dst) if a.alloc == temp.alloc.id else a for a in ins.writes)
        reads = ins.reads + ((self.access(dst),) if accumulate else ())
        attrs = tuple(kv for kv in ins.attrs if not (accumulate and kv[0] == "accumulate"))
        attrs += (("accumulate", True),) if accumulate else ()
        self.instrs[-1] = Instr(
            ins.index,
            ins.opcode,
            ins.engine,
            ins.partitions,
            ins.free_size,
            ins.dtype,
            reads,
            new_w,
            ins.line,
            ins.loops,
            attrs,
        )
        dst.alloc.root.ever_written = True
        dst.alloc.root.producer = ins.index
        if dst.alloc.blocks is not None:
            self.touch_blocks(dst.alloc, dst, ins.index)
        if dst.alloc.written is not None:
            box = temp.alloc.last_write if temp.alloc.last_write is not None else temp
            src = temp.alloc.written[box.np_index()]  # type: ignore[index]
            src = src.reshape(dst.shape) if src.size == int(np.prod(dst.shape)) else src.all()
            idx = dst.np_index()
            if accumulate:
                # The first matmul of an accumulation group into memory nothing wrote starts it
                # (the `+=` into a fresh PSUM tile): those elements take the product itself.
                before = dst.alloc.written[idx]
                if not before.all():
                    fresh = temp.alloc.data[box.np_index()].reshape(dst.shape)  # type: ignore[index]
                    cur = dst.alloc.data[idx]  # type: ignore[index]
                    dst.alloc.data[idx] = np.where(before, cur, fresh)  # type: ignore[index]
            dst.alloc.written[idx] = src
            if self.windows:
                self.stamp(dst)
        if dst.alloc.blocks is None and dst.alloc.kind != "hbm":
            root = dst.alloc.root
            root.first = ins.index if root.first < 0 else root.first
            root.last = ins.index
        # The temporary was never needed: its memory is not charged for the instruction.
        if temp.alloc.first == ins.index:
            temp.alloc.first = temp.alloc.last = -1

    def to_trace(self, outputs: tuple[int, ...] = ()) -> Trace:
        return Trace(
            self.kernel,
            self.file,
            self.hw.name,
            tuple(self.instrs),
            tuple(self.allocs),
            tuple(self.loops),
            outputs,
            {
                "mode": "execute" if self.execute else "trace",
                "peak_sbuf_bytes_per_partition": self.peak_bytes["sbuf"],
                "peak_psum_bytes_per_partition": self.peak_bytes["psum"],
                "loop_limit": self.loop_limit if isinstance(self.loop_limit, int) else None,
                "iteration_ends": tuple(self.iteration_ends),
            },
        )
