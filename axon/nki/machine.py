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
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from axon.errors import NKIError
from axon.nki.memory import Allocation, View
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA, ISA_LIMITS
from axon.target.trace import Access, Alloc, Instr, Loop, Trace

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The one piece of process state: which Machine the nl/nisa calls of this thread belong to.
_ACTIVE: contextvars.ContextVar[Machine | None] = contextvars.ContextVar("axon_nki_machine", default=None)


# Trace buffer ids of single blocks of block tensors (`Access.alloc`), apart from allocation ids.
BLOCK_ID_BASE = 1 << 40
_DTYPE_NAMES: dict[Any, str] = {}  # dtype -> name (np.dtype.name is slow); a cache, not state


class LoopVar(int):
    """A loop's iteration value that remembers its loop (for `nl.loop_reduce(loop_indices=...)`);
    arithmetic on it gives plain ints."""

    loop_id: int

    def __new__(cls, value: int, loop_id: int) -> LoopVar:
        v = super().__new__(cls, value)
        v.loop_id = loop_id
        return v


class nc_version:
    """`nki.isa.nc_version`: the NeuronCore generation (gen2 trn1/inf2, gen3 trn2, gen4 trn3)."""

    gen2, gen3, gen4 = "gen2", "gen3", "gen4"


def get_nc_version() -> str:
    """`nki.isa.get_nc_version()`: the generation of the hardware the kernel runs on."""
    name = active().hw.name
    return {"trn1": nc_version.gen2, "inf2": nc_version.gen2, "trn2": nc_version.gen3, "trn3": nc_version.gen4}.get(
        name, nc_version.gen2
    )


def active() -> Machine:
    m = _ACTIVE.get()
    if m is None:
        raise NKIError("NKI calls must run inside a kernel: use axon.nki.run(kernel, ...) or axon.nki.trace(...)")
    return m


def maybe_active() -> Machine | None:
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
        self.program_ids: tuple[int, ...] = ()
        self.num_programs: tuple[int, ...] = ()
        self._token: contextvars.Token[Machine | None] | None = None
        self.capacity = {"sbuf": hw.memory.sbuf_bytes_per_partition, "psum": hw.memory.psum_bytes_per_partition}
        # Trace mode only: top-level loops run at most this many iterations, or as many as
        # `loop_limit(trip_count)` says (their Loop records keep the true trip count); `axon.measure`
        # extrapolates the timing of the rest. None: run all.
        self.loop_limit: Any = None

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

    # ---- memory --------------------------------------------------------------------------------
    def allocate(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        kind: str,
        name: str = "",
        par_axis: int | None = 0,
        temp: bool = False,
        direct: Any = None,
    ) -> Allocation:
        """A new tensor; checks the partition limit, the PSUM bank size and live capacity.

        Block dimensions (axes before `nl.par_dim`) are logical: such a tensor is charged per block,
        from the first instruction that touches the block to the last (`check_liveness`), as the
        compiler allocates them. A plain tile is charged from its allocation until it dies (its
        loop iteration ends or the kernel drops it). `direct` (an `nki.compiler` allocator) places
        the tensor by hand: it is charged its declared footprint, checked against the memory.
        """
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
                raise self.fail(
                    "partition axis > 128",
                    f"tile shape {list(shape)} puts {shape[par_axis]} "  # type: ignore[index]
                    f"on the partition axis (at most {pmax} partitions)",
                    site,
                )
            tile = dtype.itemsize
            for a in range(par_axis + 1, len(shape)):  # type: ignore[operator]
                tile *= shape[a]
            if kind == "psum" and tile > self.hw.memory.psum_bank_bytes:
                bank = self.hw.memory.psum_bank_bytes
                raise self.fail(
                    "PSUM tile larger than a bank",
                    f"tile {list(shape)} {dtype.name} needs {tile} bytes per partition; a PSUM bank holds {bank}",
                    site,
                )
            if direct is not None:
                charged = self._direct_footprint(alloc, tile, direct, site)
            elif par_axis:  # block dimensions: charged per block while live
                alloc.blocks = {}
                alloc.block_bytes = tile
                self._block_allocs.append(alloc)
                charged = tile
            if charged > self.capacity[kind]:
                raise self.fail(
                    f"{kind.upper()} capacity exceeded",
                    f"{list(shape)} {dtype.name} needs {charged} bytes per partition, over the "
                    f"{self.capacity[kind]} of {self.hw.name}",
                    site,
                )
            # A hand-placed tensor owns its address range (the kernel may overlay several on
            # purpose, used at different times): checked against the memory above, not summed.
            if not par_axis and direct is None:
                self.live[alloc.id] = (weakref.ref(alloc), charged)
                alloc.release = self.free
        parts = 1 if par_axis is None else shape[par_axis]
        self.allocs.append(
            Alloc(
                alloc.id,
                kind,
                alloc.name,
                shape,
                dtype.name,
                parts,
                alloc.free_bytes,
                f"{os.path.basename(site[0])}:{site[1]}",
                len(self.loop_stack),
            )
        )
        return alloc

    def _direct_footprint(self, alloc: Allocation, tile: int, direct: Any, site: tuple[str, int]) -> int:
        """Bytes per partition a hand-placed tensor occupies; it must lie inside the memory.

        With block dimensions, `num_free_tiles` / `num_bank_tiles` is the number of physical tiles
        the blocks rotate through (block i in tile i mod n); without, it splits the free size,
        which is then the whole footprint."""
        n = 1
        for t in direct.tiles:
            n *= t
        kind = alloc.kind
        if not alloc.par_axis:
            tile, n = alloc.free_bytes, 1
        if kind == "psum":
            bank = self.hw.memory.psum_bank_bytes
            banks = self.capacity["psum"] // bank
            n = n if alloc.par_axis else -(-tile // bank)
            if direct.base + n > banks:
                raise self.fail(
                    "PSUM direct allocation out of range",
                    f"{alloc.name} {list(alloc.shape)} takes banks "
                    f"{direct.base}..{direct.base + n - 1}; {self.hw.name} has {banks}",
                    site,
                )
            return n * bank
        end = direct.base + n * tile
        if end > self.capacity["sbuf"]:
            raise self.fail(
                "SBUF direct allocation out of range",
                f"{alloc.name} {list(alloc.shape)} at byte "
                f"{direct.base} with {n} tile(s) of {tile} bytes ends at {end}, over the "
                f"{self.capacity['sbuf']} of {self.hw.name}",
                site,
            )
        return n * tile

    def free(self, alloc: Allocation) -> None:
        """A tile the kernel dropped: its span (first to last access) is final."""
        entry = self.live.pop(alloc.id, None)
        if entry is not None and alloc.first >= 0:
            self._ended.append((alloc.first, alloc.last + 1, alloc.kind, entry[1], alloc.name, alloc.shape))

    def touch_blocks(self, al: Allocation, v: View, index: int) -> None:
        """Record that instruction `index` touches the blocks of block tensor `al` that `v` covers."""
        pa = al.par_axis
        blocks = al.blocks
        sizes = v.sizes
        if all(sizes[a] == 1 for a in range(pa)):
            key = v.starts[:pa]
            span = blocks.get(key)
            if span is None:
                blocks[key] = [index, index]
            else:
                span[1] = index
            return
        import itertools

        ranges = [range(v.starts[a], v.starts[a] + v.steps[a] * v.sizes[a], v.steps[a]) for a in range(pa)]
        count = 1
        for r in ranges:
            count *= len(r)
        al.root.block_peak = max(al.root.block_peak, count)
        for key in itertools.product(*ranges):
            span = blocks.get(key)
            if span is None:
                blocks[key] = [index, index]
            else:
                span[1] = index

    def check_liveness(self) -> None:
        """SBUF/PSUM in use over the kernel, by liveness as the compiler allocates: a tile from its
        first to its last access (not while a Python name holds it), a block tensor per block.

        Two figures per memory. In program order (the trace's peak): each block from its first to
        its last access. At best (what is checked): each block tensor needs, from its first to its
        last access, only the blocks one instruction touches at once, since the compiler fuses and
        reorders `affine_range` loops so that a block is consumed soon after it is produced and
        rotates few physical buffers (the measured trn1 kernels rely on it). A kernel is rejected
        only when even that does not fit, naming the tensors live at that point."""
        n = len(self.instrs) + 1
        plain = list(self._ended)
        for ref, b in self.live.values():
            al = ref()
            if al is not None and al.first >= 0:
                plain.append((al.first, al.last + 1, al.kind, b, al.name, al.shape))
        in_order = list(plain)
        at_best = list(plain)
        for al in self._block_allocs:
            spans = list(al.blocks.values())  # type: ignore[union-attr]
            if not spans:
                continue
            for first, last in spans:
                in_order.append((first, last + 1, al.kind, al.block_bytes, al.name, al.shape))
            first = min(f for f, _ in spans)
            last = max(e for _, e in spans)
            at_best.append((first, last + 1, al.kind, al.block_bytes * al.block_peak, al.name, al.shape))
        for kind in ("sbuf", "psum"):
            rows = [iv for iv in at_best if iv[2] == kind]
            use, spans = self._sweep(rows, n)
            if self._block_allocs:
                peak, _ = self._sweep([iv for iv in in_order if iv[2] == kind], n)
            else:
                peak = use  # without block tensors the two figures are one
            if peak is not None:
                self.peak_bytes[kind] = max(self.peak_bytes[kind], int(peak.max()))
            if use is None or use.max() <= self.capacity[kind]:
                continue
            t = int(np.argmax(use > self.capacity[kind]))
            live = [(r[3], f"{r[4]} {list(r[5])} ({r[3]} B)") for r, (s0, e0) in zip(rows, spans) if s0 <= t < e0]
            live.sort(key=lambda x: -x[0])
            names = ", ".join(txt for _, txt in live[:8]) + (f" and {len(live) - 8} more" if len(live) > 8 else "")
            ins = self.instrs[min(t, len(self.instrs) - 1)]
            raise self.fail(
                f"{kind.upper()} capacity exceeded",
                f"{use[t]} bytes per partition live at instruction {t} ({ins.opcode}) even with one block "
                f"of each block tensor, over the {self.capacity[kind]} of {self.hw.name}; live: {names}",
                (self.file, ins.line),
            )

    @staticmethod
    def _sweep(rows: list[tuple[Any, ...]], n: int) -> tuple[Any, list[tuple[int, int]]]:
        """Bytes in use at each instruction index, from (start, end, kind, bytes, ...) spans."""
        if not rows:
            return None, []
        start = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        end = np.fromiter((r[1] for r in rows), np.int64, len(rows))
        size = np.fromiter((r[3] for r in rows), np.int64, len(rows))
        delta = np.bincount(start, weights=size, minlength=n + 1) - np.bincount(end, weights=size, minlength=n + 1)
        return np.cumsum(delta).astype(np.int64), list(zip(start.tolist(), end.tolist()))

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
                yield LoopVar(value, lid)
        finally:
            self.loop_stack = outer

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
        ident = al.id
        if al.blocks is not None and all(v.sizes[a] == 1 for a in range(pa)):  # type: ignore[arg-type]
            # One block of a block tensor: its own buffer (blocks are allocated apart, by
            # liveness), so the simulator tracks its accesses apart from the other blocks'.
            key = (al.id, v.starts[:pa])
            ident = self._block_ids.get(key)  # type: ignore[assignment]
            if ident is None:
                ident = self._block_ids[key] = BLOCK_ID_BASE + len(self._block_ids)
            base = sum(v.starts[a] * al.strides[a] for a in range(pa))  # type: ignore[arg-type]
            lo -= base
            hi -= base
        return Access(ident, al.kind, plo, phi, lo * isz, (hi + 1) * isz, touched * isz * parts, (stride or 1) * isz)

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
            raise self.fail(
                "out of bounds",
                f"{opcode} {role} indexes outside tensor {v.alloc.name} {list(v.alloc.shape)} (mask it or slice it)",
                site,
            )
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

    def check_readable(self, v: View, role: str, opcode: str, site: tuple[str, int]) -> Any:
        """Which elements of `v` hold written data: None when all do, else a bool mask of `v.shape`
        (execute mode) or False (trace mode: nothing ever wrote the tensor). Reading never-written
        memory is legal (a masked partial tile read later by an unmasked op); the result carries the
        mask on, and `issue` fails when such data reaches HBM."""
        al = v.alloc
        if al.written is not None:
            mask = al.written[v.np_index()]
            return None if mask.all() else mask
        return None if (al._root or al).ever_written else False

    def _defined(
        self, opcode: str, attrs: tuple[tuple[str, Any], ...], reads: list[tuple[str, View, Any]], dst: View
    ) -> Any:
        """The written-mask of `dst` after an instruction whose inputs are partly never-written:
        elementwise for same-size operands, per partition for reductions and broadcasts, by
        row and column for matmuls, transposed for transposes; wholly undefined otherwise."""
        if not self.execute:
            return False
        out = np.ones(dst.shape, dtype=bool)
        transpose = opcode in ("nc_transpose", "dma_transpose") or dict(attrs).get("is_transpose")
        if opcode == "nc_matmul" and not transpose:
            masks = {
                role: (np.ones(v.shape, bool) if m is None else m).reshape(v.partitions, -1) for role, v, m in reads
            }
            if "stationary" in masks and "moving" in masks:
                cols = masks["stationary"].all(0)[:, None] & masks["moving"].all(0)[None, :]
                out &= cols.reshape(dst.shape) if cols.size == out.size else cols.all()
            if "dst" in masks:
                out &= masks["dst"].reshape(dst.shape)
            return out
        for role, v, m in reads:
            if m is None:
                continue
            if m is False:
                return False
            if transpose and m.ndim == 2:
                m = m.T
            if m.size == out.size:
                out &= m.reshape(out.shape)
            elif out.ndim and m.ndim and m.shape[0] == out.shape[0]:
                out &= m.reshape(m.shape[0], -1).all(1).reshape((-1,) + (1,) * (out.ndim - 1))
            else:
                out[...] = False
        return out

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
        if not checked:  # the caller has already checked operands it had to check early
            for role, v in reads:
                self.check_operand(opcode, role, v, engine, site)
            for role, v in writes:
                self.check_operand(opcode, role, v, engine, site)
        undefined = None
        for role, v in reads + (writes if read_dst else []):
            mask = self.check_readable(v, role, opcode, site)
            if mask is not None:
                undefined = (undefined or []) + [(role, v, mask)]
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
        racc = tuple(self.access(v) for _, v in reads)
        wacc = tuple(self.access(v) for _, v in writes)
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
        return index

    def retarget_last(self, temp: View, dst: View, accumulate: bool) -> None:
        """Legacy `dst[...] = op(...)` / `dst += nc_matmul(...)`: the instruction that produced the
        temporary writes `dst` directly (as the NKI compiler does), instead of a copy."""
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
            },
        )
