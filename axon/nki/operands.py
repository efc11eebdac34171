"""The operand side of the running kernel (a mixin of `Machine`): the ISA table's rules an operand
must satisfy (buffer, engine access, bounds, partition and free limits), which of its elements hold
written data, and its record in the trace (`Access`). Recording instructions is `Machine.issue`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from axon.errors import NKIError
from axon.nki.memory import View
from axon.target.hardware import HardwareSpec
from axon.target.isa import ISA, ISA_LIMITS
from axon.target.trace import Access

# Trace buffer ids of single blocks of block tensors (`Access.alloc`), apart from allocation ids.
BLOCK_ID_BASE = 1 << 40


def _resolve(hw: HardwareSpec, path: str) -> int:
    if path in ISA_LIMITS:
        return ISA_LIMITS[path]
    obj: Any = hw
    for part in path.split("."):
        obj = getattr(obj, part)
    return int(obj)


class MachineOperands:
    """Operand checks and records; the attributes are `Machine`'s (set in its `__init__`)."""

    hw: HardwareSpec
    execute: bool
    _limits: dict[str, int]
    _accesses: dict[tuple[Any, ...], Access]
    _block_ids: dict[tuple[int, tuple[int, ...]], int]

    if TYPE_CHECKING:  # Machine's, declared for the type checker only

        def fail(self, rule: str, detail: str, site: tuple[str, int] | None = None) -> NKIError: ...

    def access(self, v: View) -> Access:
        """The trace's record of `v`: a pure function of the key below (the block id a block gets is
        fixed at its first access), so kept per machine, since loop bodies touch the same tiles."""
        al = v.alloc
        key = (
            al.id,
            al.kind,
            al.par_axis,
            al.strides,
            al.dtype.itemsize,
            al.blocks is None,
            v.starts,
            v.steps,
            v.sizes,
        )
        known = self._accesses.get(key)
        if known is None:
            known = self._accesses[key] = self._access(v)
        return known

    def _access(self, v: View) -> Access:
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
        if al.blocks is not None and pa is not None and all(v.sizes[a] == 1 for a in range(pa)):
            # One block of a block tensor: its own buffer (blocks are allocated apart, by
            # liveness), so the simulator tracks its accesses apart from the other blocks'.
            key = (al.id, v.starts[:pa])
            known = self._block_ids.get(key)
            if known is None:
                known = self._block_ids[key] = BLOCK_ID_BASE + len(self._block_ids)
            ident = known
            base = sum(v.starts[a] * al.strides[a] for a in range(pa))
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
        if v.maybe_oob and not v.in_bounds():
            raise self.fail(
                "out of bounds",
                f"{opcode} {role} indexes outside tensor {v.alloc.name} {list(v.alloc.shape)} (mask it or slice it)",
                site,
            )
        if kind == "hbm":
            return
        # `v.partition_first`, `v.partitions` and `v.free_size`, inlined: this runs for every operand
        pa = v.alloc.par_axis
        kept = v.kept
        if not (pa is None or (kept and kept[0] == pa) or pa not in kept):
            raise self.fail("partition axis first", f"{opcode} {role} {v!r} must have the partition axis first", site)
        limits = self._limits
        if rule.max_partitions is not None:
            limit = limits.get(rule.max_partitions) or self.limit(rule.max_partitions)
            if (1 if pa is None else v.sizes[pa]) > limit:
                raise self.fail(
                    f"partition axis > {limit}",
                    f"{opcode} {role} spans {v.partitions} partitions (at most {limit})",
                    site,
                )
        if rule.max_free is not None:
            limit = limits.get(rule.max_free) or self.limit(rule.max_free)
            sizes = v.sizes
            free = 1
            for a in kept:
                if a != pa:
                    free *= sizes[a]
            if free > limit:
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
            masks: dict[str, np.ndarray] = {
                role: (np.ones(v.shape, bool) if m is None else m).reshape(v.partitions, -1) for role, v, m in reads
            }
            if "stationary" in masks and "moving" in masks:
                stationary_cols = np.asarray(masks["stationary"].all(0))
                moving_cols = np.asarray(masks["moving"].all(0))
                cols = stationary_cols[:, None] & moving_cols[None, :]
                out &= cols.reshape(dst.shape) if cols.size == out.size else cols.all()
            if "dst" in masks:
                out &= masks["dst"].reshape(dst.shape)
            return out
        for _, _, m in reads:
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
