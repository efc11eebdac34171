"""Which loop-invariant SBUF tiles the compiler does not keep across a loop's iterations.

The Neuron compiler software-pipelines an affine loop when it can, allocating the tiles one
iteration holds `loop_tile_buffers` times (the timing model's rotating buffers). Tiles the loop
reads in several iterations but got before it (a block of weights loaded outside the loop) stay in
SBUF only if they fit beside those; if not, it keeps none of them across iterations: every
iteration loads them again (the loads sink into the loop), rather than giving up the pipelining.
Evidence: the NKIBench matmul M4096 N12288 K5120 profiled on trn1 (../shared/data/nkibench-trn1)
reads a 160 KB a partition block of B in each of 32 iterations whose own tiles peak at 24 KB:
160 + 2 x 24 KB does not fit (160 + 24 would), and the profiler's HBM reads are exactly B 32 times
plus A 12 times (9,059.8 MB) with no spills - all of the block, every iteration. Where the
pipelined body alone would not fit, the loop runs unpipelined and keeps what fits beside one body
(the published tutorial matmul v3: a 128 KB block per iteration, 22 ms measured).
`residency.py` applies the answer while it replays the trace.
"""

from __future__ import annotations

from collections import Counter

from axon.target.trace import Trace


def _footprint(trace: Trace, buffers: int) -> int:
    """SBUF bytes per partition the kernel's allocations take: a tile allocated in a loop body
    (one site, a new allocation each iteration) takes `buffers` rotating buffers of its largest size."""
    allocs = trace.allocs
    total = sum(a.bytes_per_partition for a in allocs if a.loop_depth <= 0 and a.buffer == "sbuf")
    sites: dict[str, list[int]] = {}  # site -> [allocations, largest bytes per partition]
    for (site, size), n in Counter(
        (a.site, a.bytes_per_partition) for a in allocs if a.loop_depth > 0 and a.buffer == "sbuf"
    ).items():
        got = sites.setdefault(site, [0, 0])
        got[0], got[1] = got[0] + n, max(got[1], size)
    return total + sum(min(n, buffers) * size for n, size in sites.values())


def sunk_tiles(
    trace: Trace, capacity: float, buffers: int, last_read: dict[int, int]
) -> dict[int, list[tuple[int, int, int]]]:
    """Instruction -> the SBUF bytes ((access alloc id, lo, hi) a partition) the compiler does not
    keep across the loop iteration that instruction starts, as the loop's invariant tiles do not fit
    beside its body (`last_read`: tile -> the last instruction reading it).

    A loop instance's invariant tiles: SBUF bytes written before the instance and read in at least
    two of its iterations. Its body: the most bytes of the tiles the compiler places - allocated in
    a loop body, or blocks of a block tensor - live at once in one iteration beyond those live when
    it started (a tile lives from its first write to its last read), times `buffers` for an affine
    loop of several iterations if that alone fits (the compiler pipelines it). A kernel's own
    top-level tile is one buffer whatever the loops do, so it is not part of any body. Over
    `capacity` together: every invariant tile is dropped at the start of each iteration after the
    first. Nothing is when the kernel's allocations fit SBUF with `buffers` rotating buffers per
    in-loop allocation (`_footprint`): then every tile has a place of its own.
    """
    if _footprint(trace, buffers) <= capacity:
        return {}
    pipelined = {lp.id for lp in trace.loops if lp.kind == "affine" and lp.trip_count > 1}
    fixed = {a.id for a in trace.allocs if a.loop_depth <= 0}  # the kernel's own top-level tiles
    written: dict[int, int] = {}  # tile -> the last instruction that wrote it
    held: dict[int, int] = {}  # live tile -> its bytes a partition
    seen_writes: set[tuple[int, int, int]] = set()
    live = 0
    # Open loop instances, outermost first: [loop id, iteration, first instruction,
    # {(tile, lo, hi) read: [last iteration read, iterations read]}, live bytes when this iteration
    # started, the most live bytes in this iteration, the largest body so far, iteration starts]
    stack: list[list] = []
    out: dict[int, list[tuple[int, int, int]]] = {}

    def close(level: list) -> None:
        invariant = sorted(k for k, v in level[3].items() if v[1] > 1)
        if not invariant:
            return
        size, alloc, end = 0, -1, 0  # bytes a partition of the union of the ranges, per tile
        for k in invariant:
            if k[0] != alloc:
                alloc, end = k[0], k[1]
            size += max(k[2] - max(k[1], end), 0)
            end = max(end, k[2])
        body = max(level[6], level[5] - level[4])
        if level[0] in pipelined and body * buffers <= capacity:  # pipelined when that fits
            body *= buffers
        if body + size <= capacity:
            return
        for i in level[7][1:]:
            out.setdefault(i, []).extend(invariant)

    last: tuple = ()
    innermost = -1  # first instruction of the innermost open instance
    for ins in trace.instructions:
        i, loops = ins.index, ins.loops
        if loops != last:  # entered, left or moved to the next iteration of a loop
            last = loops
            d, n = 0, min(len(stack), len(loops))
            while d < n and stack[d][0] == loops[d][0] and stack[d][1] == loops[d][2]:
                d += 1
            next_iteration = d < n and stack[d][0] == loops[d][0]  # else a new instance (or none) at depth d
            for level in reversed(stack[d + next_iteration :]):  # instances that ended
                close(level)
            if next_iteration:
                level = stack[d]
                del stack[d + 1 :]
                level[1], level[6] = loops[d][2], max(level[6], level[5] - level[4])
                level[4] = level[5] = live
                level[7].append(i)
                d += 1
            else:
                del stack[d:]
            for lid, _kind, it in loops[d:]:
                stack.append([lid, it, i, {}, live, live, 0, [i]])
            innermost = stack[-1][2] if stack else -1
        for a in ins.reads:
            if a.buffer == "sbuf" and stack:
                w = written.get(a.alloc, -1)
                if w >= innermost:  # written inside the innermost instance: carried into none
                    continue
                key = (a.alloc, a.byte_lo, a.byte_hi)
                for level in stack:
                    if level[2] > w:  # written before this instance: carried into it
                        seen = level[3].get(key)
                        if seen is None:
                            level[3][key] = [level[1], 1]
                        elif seen[0] != level[1]:
                            seen[0] = level[1]
                            seen[1] += 1
        for a in ins.writes:
            if a.buffer == "sbuf":
                written[a.alloc] = i
                key = (a.alloc, a.byte_lo, a.byte_hi)
                if a.alloc not in fixed and key not in seen_writes and last_read.get(a.alloc, -1) > i:
                    seen_writes.add(key)
                    held[a.alloc] = held.get(a.alloc, 0) + a.byte_hi - a.byte_lo
                    live += a.byte_hi - a.byte_lo
                    for level in stack:
                        if live > level[5]:
                            level[5] = live
        for a in ins.reads:
            if a.buffer == "sbuf" and last_read.get(a.alloc) == i and a.alloc in held:
                live -= held.pop(a.alloc)
    for level in reversed(stack):
        close(level)
    return out
