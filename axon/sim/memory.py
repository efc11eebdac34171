"""Who last wrote and read each piece of memory: the dependency half of the timing simulator.

Allocations are first mapped to physical slots (a tile allocated in a loop body rotates over a
bounded number of buffers, so iteration i reuses the memory of iteration i - buffers and must wait
for it); then each slot keeps the recent writes and reads as partition x byte boxes, so an
instruction finds the RAW, WAR and WAW producers it has to wait for. It knows nothing of costs.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

from axon.target.trace import Access, Alloc

# One record: (partition_lo, partition_hi, byte_lo, byte_hi, time, engine, instruction index, end).
# time = when the data is usable (writes) or released (reads); end = when the instruction ended.
Record = tuple[int, int, int, int, float, str, int, float]
RAW, WAR, WAW = 0, 1, 2


def buffer_slots(allocs: Iterable[Alloc], loop_buffers: int) -> dict[int, int]:
    """Map alloc id -> physical slot: allocations of one in-loop tile (site, buffer, shape and dtype:
    a line such as `nl.matmul`'s may allocate several tiles) share `loop_buffers` slots.

    >>> from axon.target.trace import Alloc
    >>> a = [Alloc(i, "sbuf", "t", (128, 512), "float32", 128, 2048, "k.py:7", loop_depth=1) for i in range(4)]
    >>> sorted(buffer_slots(a, 2).values())
    [0, 0, 1, 1]
    """
    slots: dict[int, int] = {}
    seen: dict[tuple, int] = {}
    named: dict[tuple, int] = {}
    for alloc in sorted(allocs, key=lambda a: a.id):
        if alloc.loop_depth <= 0 or loop_buffers <= 0:
            slots[alloc.id] = len(named)
            named[("", "", -alloc.id - 1)] = slots[alloc.id]
            continue
        key = (alloc.site, alloc.buffer, alloc.shape, alloc.dtype)  # one line may allocate several tiles
        k = seen.get(key, 0)
        seen[key] = k + 1
        slot_key = (*key, k % loop_buffers)
        if slot_key not in named:
            named[slot_key] = len(named)
        slots[alloc.id] = named[slot_key]
    return slots


class _BoxIndex:
    """The boxes of one table that is never pruned (an HBM slot's) by first byte, so that the boxes
    overlapping a box are found without scanning them all; they come out in the table's order
    (first insertion, as a dict iterates), which is what `producers` returns."""

    __slots__ = ("entries", "widest")

    def __init__(self, table: dict[tuple, Record]):
        self.entries: list[tuple[int, int, tuple]] = [(box[2], seq, box) for seq, box in enumerate(table)]
        self.entries.sort()
        self.widest = max((box[3] - box[2] for box in table), default=0)

    def add(self, box: tuple, seq: int) -> None:
        """A box new to the table, its `seq`-th."""
        insort(self.entries, (box[2], seq, box))
        if box[3] - box[2] > self.widest:
            self.widest = box[3] - box[2]

    def overlapping(self, table: dict[tuple, Record], plo: int, phi: int, blo: int, bhi: int) -> list[Record]:
        e = self.entries
        # a box overlapping [blo, bhi) starts below bhi and above blo - widest
        first, last = bisect_left(e, (blo - self.widest + 1,)), bisect_left(e, (bhi,))
        hits = []
        for i in range(first, last):
            _, seq, box = e[i]
            r = table[box]
            if r[0] < phi and plo < r[1] and r[2] < bhi and blo < r[3]:
                hits.append((seq, r))
        hits.sort()
        return [r for _, r in hits]


_SCAN = 48  # an HBM table longer than this is searched through its `_BoxIndex`


class MemoryState:
    """Recent writers and readers of every slot, one record per distinct partition x byte box.

    A newer access to the same box replaces the older record (it already waited for it); a write
    also drops the records it covers. Two DMA writes to HBM are not ordered (WAW): HBM accesses are
    bounding byte ranges, so tiles of different columns would look overlapping, and kernels never
    write one HBM element twice without reading it in between. So HBM tables only grow (a kernel's
    HBM scratch tensors collect thousands of boxes), and long ones are searched by index.
    """

    __slots__ = ("writers", "readers", "slots", "_next", "_index")

    def __init__(self, slots: dict[int, int]):
        self.slots = slots
        self.writers: dict[int, dict[tuple, Record]] = {}
        self.readers: dict[int, dict[tuple, Record]] = {}
        self._next = len(slots) + 1
        # (table kind 0 writers / 1 readers, slot) -> index of an HBM table longer than _SCAN
        self._index: dict[tuple[int, int], _BoxIndex] = {}

    def slot(self, alloc: int) -> int:
        s = self.slots.get(alloc)
        if s is None:  # an access to memory the trace did not declare: its own slot
            s = self.slots[alloc] = self._next
            self._next += 1
        return s

    def _overlapping(self, kind: int, s: int, table: dict[tuple, Record], a: Access) -> list[Record] | None:
        """The records of `table` overlapping `a` through its index (None: scan the table)."""
        if a.buffer != "hbm" or len(table) <= _SCAN:
            return None
        index = self._index.get((kind, s))
        if index is None:
            index = self._index[(kind, s)] = _BoxIndex(table)
        return index.overlapping(table, a.partition_lo, a.partition_hi, a.byte_lo, a.byte_hi)

    def producers(self, reads: tuple[Access, ...], writes: tuple[Access, ...]) -> list[tuple[Record, int]]:
        """The records an instruction must wait for, each with its kind (RAW, WAR or WAW)."""
        out: list[tuple[Record, int]] = []
        writers, readers, slots = self.writers, self.readers, self.slots
        for a in reads:
            s = slots.get(a.alloc)
            if s is None:
                s = self.slot(a.alloc)
            table = writers.get(s)
            if table:
                found = self._overlapping(0, s, table, a)
                if found is not None:
                    out.extend([(r, RAW) for r in found])
                    continue
                plo, phi, blo, bhi = a.partition_lo, a.partition_hi, a.byte_lo, a.byte_hi
                for r in table.values():
                    if r[0] < phi and plo < r[1] and r[2] < bhi and blo < r[3]:
                        out.append((r, RAW))
        for a in writes:
            s = slots.get(a.alloc)
            if s is None:
                s = self.slot(a.alloc)
            plo, phi, blo, bhi = a.partition_lo, a.partition_hi, a.byte_lo, a.byte_hi
            if a.buffer != "hbm":
                table = writers.get(s)
                if table:
                    for r in table.values():
                        if r[0] < phi and plo < r[1] and r[2] < bhi and blo < r[3]:
                            out.append((r, WAW))
            table = readers.get(s)
            if table:
                found = self._overlapping(1, s, table, a)
                if found is not None:
                    out.extend([(r, WAR) for r in found])
                    continue
                for r in table.values():
                    if r[0] < phi and plo < r[1] and r[2] < bhi and blo < r[3]:
                        out.append((r, WAR))
        return out

    def record(
        self, reads: tuple[Access, ...], writes: tuple[Access, ...], end: float, ready: float, engine: str, index: int
    ) -> None:
        """Remember the accesses of an instruction that ends at `end` (its result usable at `ready`)."""
        indexes, slots, readers, writers = self._index, self.slots, self.readers, self.writers
        for a in reads:
            s = slots.get(a.alloc)
            if s is None:
                s = self.slot(a.alloc)
            box = (a.partition_lo, a.partition_hi, a.byte_lo, a.byte_hi)
            table = readers.get(s)
            if table is None:
                table = readers[s] = {}
            old = table.get(box)
            if old is None:
                known = indexes.get((1, s)) if indexes else None
                if known is not None:
                    known.add(box, len(table))
            if old is None or old[4] <= end:
                table[box] = (*box, end, engine, index, end)
        for a in writes:
            s = slots.get(a.alloc)
            if s is None:
                s = self.slot(a.alloc)
            box = (a.partition_lo, a.partition_hi, a.byte_lo, a.byte_hi)
            plo, phi, blo, bhi = box
            hbm = a.buffer == "hbm"
            # An HBM write did not wait for older HBM writes, so it cannot stand in for them (nor,
            # through them, for their readers): HBM records are never pruned by a write.
            for kind, tables in () if hbm else ((0, writers), (1, readers)):
                table = tables.get(s)
                if table and indexes:
                    indexes.pop((kind, s), None)  # (only HBM tables have one: kept for safety)
                if table and (len(table) > 1 or box not in table):
                    # This write waited for everything it covers; later accesses need only wait for it.
                    for k in [k for k in table if plo <= k[0] and k[1] <= phi and blo <= k[2] and k[3] <= bhi]:
                        del table[k]
                elif table:
                    table.clear()
            table = writers.get(s)
            if table is None:
                table = writers[s] = {}
            old = table.get(box)
            if old is None:
                known = indexes.get((0, s)) if indexes else None
                if known is not None:
                    known.add(box, len(table))
            if not hbm or old is None or old[4] <= ready:
                table[box] = (*box, ready, engine, index, end)
