"""What the compiler's SBUF allocation adds to and removes from a kernel's HBM traffic.

A trace says which tiles a kernel loads and computes, not where the compiler keeps them. The
Neuron compiler keeps a tile in SBUF while it fits: a load of HBM bytes still resident (and not
written since) is not issued again - a loop-invariant load leaves its loop. When the live tiles
outgrow SBUF it evicts: a tile loaded from HBM is loaded again at its next use, a computed tile
still to be read is spilled (written to HBM) and reloaded. This module replays a trace against
such an SBUF (`compiler_sbuf_fraction` of each partition, per-partition bytes) and says, per
instruction, which loads vanish and which transfers appear. It times nothing (that is
`simulate`) and does not model PSUM, which the compiler never spills.

The allocator also decides per loop, not per tile (`invariant.py`): tiles a loop reuses across
its iterations stay only if they fit beside its (software-pipelined) body; otherwise every
iteration reads them again. Those are dropped at each iteration's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from heapq import heappop, heappush

from axon.sim.invariant import sunk_tiles
from axon.target.hardware import HardwareSpec
from axon.target.trace import Access, Trace

# One extra transfer: (unit id, bytes, partitions, True for a spill write / False for a reload).
Transfer = tuple[int, int, int, bool]
# What evicting a tile costs, in units of its bytes moved: a tile HBM holds is reloaded (1), a computed
# one spilled and reloaded (2); bytes no live tile names, kept only because a later load reads them
# again, cost nothing to drop now (0).
_CLEAN, _DIRTY, _CACHE = 1.0, 2.0, 0.0


@dataclass
class Residency:
    """`elided`: indices of loads the compiler drops (their bytes are resident). `before[i]`: reloads
    instruction i waits for; `spills[i]`: tiles written to HBM to make room for instruction i."""

    elided: set[int] = field(default_factory=set)
    before: dict[int, list[Transfer]] = field(default_factory=dict)
    spills: dict[int, list[Transfer]] = field(default_factory=dict)
    read_bytes: int = 0  # HBM bytes the trace's loads move, after elision, plus reloads
    write_bytes: int = 0  # HBM bytes of stores plus spills


class _Unit:
    """Bytes of one tile in SBUF: size per partition, total bytes, partitions, the HBM bytes it was
    loaded from (None for a computed tile), whether it is in SBUF, whether HBM holds a copy, and its
    eviction priority."""

    __slots__ = ("uid", "size", "nbytes", "parts", "source", "resident", "in_hbm", "priority", "tick")

    def __init__(self, uid: int, size: int, nbytes: int, parts: int, source: tuple | None):
        self.uid, self.size, self.nbytes, self.parts, self.source = uid, size, nbytes, parts, source
        self.resident = True
        self.in_hbm = source is not None
        self.priority = 0.0
        self.tick = 0


class _SBUF:
    """The compiler's view of SBUF: tiles by (alloc, byte range) under GreedyDual eviction (Young,
    1994): a tile's priority is the clock at its last use plus what evicting it costs; the lowest
    goes first and sets the clock. With equal costs this is LRU."""

    def __init__(self, capacity: float, out: Residency):
        self.capacity, self.out = capacity, out
        self.units: dict[tuple[int, int, int], _Unit] = {}
        self.by_alloc: dict[int, list[tuple[int, int, int]]] = {}
        self.by_source: dict[tuple, _Unit] = {}  # (hbm alloc, range, nbytes, version) -> resident unit
        # (priority, tick, unit), possibly older than the unit's own: refreshed when popped
        self.heap: list[tuple[float, int, _Unit]] = []
        self.clock = 0.0
        self.tick = 0
        self.used = 0.0
        self.next_uid = 0

    def touch(self, u: _Unit, cost: float | None = None) -> None:
        """Set u's priority; its place among tiles of equal priority is when it first got that one."""
        priority = self.clock + (cost if cost is not None else _CLEAN if u.in_hbm else _DIRTY)
        if priority != u.priority or not u.tick:
            u.priority = priority
            self.tick += 1
            u.tick = self.tick

    def _admit(self, u: _Unit) -> None:
        u.resident = True
        self.used += u.size
        u.tick = 0
        self.touch(u)
        heappush(self.heap, (u.priority, u.tick, u))

    def _drop(self, u: _Unit) -> None:
        if u.resident:
            u.resident = False
            self.used -= u.size

    def _add_key(self, key: tuple[int, int, int], u: _Unit) -> None:
        if key not in self.units:
            self.by_alloc.setdefault(key[0], []).append(key)
        self.units[key] = u

    def new(self, key: tuple[int, int, int], a: Access, source: tuple | None) -> None:
        units = self.units
        old = units.get(key)
        keys = self.by_alloc.get(key[0])
        if old is not None:
            self._drop(old)
            self._overwritten(key)
        elif keys:  # a write into part of a resident tile changes that tile
            for k in keys:
                u = units[k]
                if u.resident and k[1] <= key[1] and key[2] <= k[2]:
                    if u.source is not None and self.by_source.get(u.source) is u:
                        del self.by_source[u.source]
                    u.source, u.in_hbm = None, False
                    self._add_key(key, u)
                    self.touch(u)
                    return
        self.next_uid += 1
        u = _Unit(self.next_uid, a.byte_hi - a.byte_lo, a.nbytes, a.partition_hi - a.partition_lo, source)
        if old is None:
            if keys is None:
                self.by_alloc[key[0]] = [key]
            else:
                keys.append(key)
        units[key] = u
        if source is not None:
            self.by_source[source] = u
        self.used += u.size
        self.tick += 1
        u.priority, u.tick = self.clock + (_CLEAN if source is not None else _DIRTY), self.tick
        heappush(self.heap, (u.priority, u.tick, u))

    def _overwritten(self, key: tuple[int, int, int]) -> None:
        """Forget the other names of bytes inside `key`, which a write of the whole range replaces:
        a part of an older tile written in place (a column window) named the old tile, and a later
        read of that part would otherwise reload the old bytes, as if they were evicted."""
        keys = self.by_alloc[key[0]]
        inside = [k for k in keys if k != key and key[1] <= k[1] and k[2] <= key[2]]
        if not inside:
            return
        gone = {id(self.units[k]): self.units[k] for k in inside}
        for k in inside:
            keys.remove(k)
            del self.units[k]
        named = {id(self.units[k]) for k in keys}  # still named by a range reaching outside `key`
        for uid, u in gone.items():
            if uid not in named:
                self._drop(u)

    def alias(self, key: tuple[int, int, int], u: _Unit) -> None:
        """A load of bytes `u` already holds: the destination names the same SBUF bytes."""
        self._add_key(key, u)
        self.touch(u)

    def read(self, i: int, a: Access) -> None:
        key = (a.alloc, a.byte_lo, a.byte_hi)
        u = self.units.get(key)
        if u is not None:
            found = [u]
        else:
            found = [self.units[k] for k in self.by_alloc.get(a.alloc, ()) if k[1] < a.byte_hi and a.byte_lo < k[2]]
        for u in found:
            if u.resident:
                self.touch(u)
                continue
            width = a.byte_hi - a.byte_lo
            if u.size > width:  # bring back only the part read
                self.next_uid += 1
                part = _Unit(self.next_uid, width, u.nbytes * width // u.size, u.parts, u.source)
                part.in_hbm = True
                self._add_key(key, part)
                u = part
            self._admit(u)
            self.out.before.setdefault(i, []).append((u.uid, u.nbytes, u.parts, False))
            self.out.read_bytes += u.nbytes

    def free(self, i: int, alloc: int, last_load: dict[tuple, int]) -> None:
        """A tile nobody reads again is freed, unless a later load reads its bytes: those stay as a
        cache of HBM (the compiler hoists the later load), first to go when room is needed."""
        for k in self.by_alloc.pop(alloc, ()):
            u = self.units.pop(k, None)
            if u is None:
                continue
            if u.source is None or last_load.get(u.source[:4], -1) <= i:
                self._drop(u)
            elif u.resident:  # a lower priority than queued: queue it again
                self.touch(u, _CACHE)
                heappush(self.heap, (u.priority, u.tick, u))

    def _out(self, i: int, u: _Unit) -> None:
        """u leaves SBUF before instruction i: written to HBM first unless HBM holds it."""
        u.resident = False
        self.used -= u.size
        if not u.in_hbm:
            u.in_hbm = True
            self.out.spills.setdefault(i, []).append((u.uid, u.nbytes, u.parts, True))
            self.out.write_bytes += u.nbytes
        if u.source is not None and self.by_source.get(u.source) is u:
            del self.by_source[u.source]

    def sink(self, i: int, ranges: list[tuple[int, int, int]]) -> None:
        """Drop the tiles holding `ranges` (see `sunk_tiles`): read again, they are reloaded."""
        for alloc, lo, hi in ranges:
            for k in self.by_alloc.get(alloc, ()):
                u = self.units[k]
                if u.resident and k[1] < hi and lo < k[2]:
                    self._out(i, u)

    def evict(self, i: int) -> None:
        heap = self.heap
        while self.used > self.capacity and heap:
            prio, tick, u = heappop(heap)
            if not u.resident:
                continue
            if tick != u.tick:  # touched since it was queued: queue it as it is now
                heappush(heap, (u.priority, u.tick, u))
                continue
            self.clock = prio
            self._out(i, u)


def replay(trace: Trace, hw: HardwareSpec) -> Residency:
    """Replay `trace` against an SBUF of `compiler_sbuf_fraction x sbuf_bytes_per_partition`.

    >>> from axon.sim.synthetic import TraceBuilder
    >>> from axon.target import load_hw
    >>> b = TraceBuilder()
    >>> x = b.hbm("x", 128 * 512 * 4)
    >>> tiles = [b.sbuf(f"t{i}", 128, 512) for i in range(2)]
    >>> _ = [b.dma(dst=b.whole(t), src=b.whole(x)) for t in tiles]  # the same bytes twice
    >>> r = replay(b.build(), load_hw("trn1"))
    >>> sorted(r.elided), r.read_bytes
    ([1], 262144)
    """
    last_read: dict[int, int] = {}
    last_load: dict[tuple, int] = {}  # HBM bytes (alloc, range, nbytes) -> the last load of them
    for ins in trace.instructions:
        for a in ins.reads:
            if a.buffer == "sbuf":
                last_read[a.alloc] = ins.index
            elif a.buffer == "hbm":
                last_load[(a.alloc, a.byte_lo, a.byte_hi, a.nbytes)] = ins.index
    dying: dict[int, list[int]] = {}  # instruction -> the tiles it reads last
    for alloc, i in last_read.items():
        dying.setdefault(i, []).append(alloc)
    out = Residency()
    sb = _SBUF(hw.memory.sbuf_bytes_per_partition * hw.memory.compiler_sbuf_fraction, out)
    units, by_source = sb.units, sb.by_source
    sunk = sunk_tiles(trace, sb.capacity, hw.memory.loop_tile_buffers, last_read)
    hbm_version: dict[int, int] = {}
    # One loop over locals on purpose (it runs once per instruction): the common cases - a read of
    # a resident tile, a new tile - are inline; the rest is `_SBUF`'s.
    for ins in trace.instructions:
        i = ins.index
        if i in sunk:
            sb.sink(i, sunk[i])
        source, hbm_read = None, 0
        for a in ins.reads:
            buffer = a.buffer
            if buffer == "sbuf":
                u = units.get((a.alloc, a.byte_lo, a.byte_hi))
                if u is not None and u.resident:
                    priority = sb.clock + (_CLEAN if u.in_hbm else _DIRTY)
                    if priority != u.priority:
                        sb.touch(u)
                else:
                    sb.read(i, a)
            elif buffer == "hbm":
                source = (a.alloc, a.byte_lo, a.byte_hi, a.nbytes, hbm_version.get(a.alloc, 0))
                hbm_read += a.nbytes
        elided = False
        for a in ins.writes:
            if a.buffer == "hbm":
                hbm_version[a.alloc] = hbm_version.get(a.alloc, 0) + 1
                out.write_bytes += a.nbytes
            elif a.buffer == "sbuf":
                key = (a.alloc, a.byte_lo, a.byte_hi)
                hit = by_source.get(source) if source is not None else None
                if hit is not None and hit.resident:  # the same bytes are in SBUF: no load
                    out.elided.add(i)
                    elided = True
                    sb.alias(key, hit)
                else:
                    sb.new(key, a, source)
        if hbm_read and not elided:
            out.read_bytes += hbm_read
        dead = dying.get(i)
        if dead is not None:
            for alloc in dead:
                sb.free(i, alloc, last_load)
        if sb.used > sb.capacity:
            sb.evict(i)
    return out
