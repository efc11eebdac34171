"""Dependencies: every conflicting pair of accesses is ordered, whatever the pruning does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from axon.sim import simulate
from axon.sim.memory import buffer_slots
from axon.sim.synthetic import TraceBuilder
from axon.target import load_hw
from axon.target.trace import Access

HW = load_hw("trn1")
ENGINES = ["vector", "scalar", "gpsimd", "tensor", "dma"]


@st.composite
def traces(draw):
    b = TraceBuilder()
    tiles = [b.sbuf(f"t{k}", 128, 256) for k in range(3)]
    hbm = b.hbm("h", 4096)
    for _ in range(draw(st.integers(1, 25))):
        eng = draw(st.sampled_from(ENGINES))

        def region():
            t = draw(st.sampled_from(tiles))
            plo = draw(st.sampled_from([0, 32, 64]))
            phi = plo + draw(st.sampled_from([32, 64]))
            blo = draw(st.sampled_from([0, 256, 512]))
            bhi = blo + draw(st.sampled_from([256, 512]))
            return Access(t.id, "sbuf", plo, phi, blo, bhi, (phi - plo) * (bhi - blo), 4)

        if eng == "dma":
            dst = region()
            if draw(st.booleans()):
                b.dma(dst, Access(hbm.id, "hbm", 0, 1, 0, dst.nbytes, dst.nbytes, 4))
            else:
                b.dma(Access(hbm.id, "hbm", 0, 1, 0, dst.nbytes, dst.nbytes, 4), dst)
        else:
            reads = [region() for _ in range(draw(st.integers(0, 2)))]
            b.op("tensor_copy", eng, reads=reads, writes=[region()], free_size=draw(st.sampled_from([64, 700])))
    return b.build()


def _overlap(a: Access, c: Access) -> bool:
    return (
        a.alloc == c.alloc
        and a.partition_lo < c.partition_hi
        and c.partition_lo < a.partition_hi
        and a.byte_lo < c.byte_hi
        and c.byte_lo < a.byte_hi
    )


def _conflict(x, y) -> bool:
    for w in x.writes:
        if any(
            _overlap(w, a)
            for a in y.reads + y.writes
            if not (a.buffer == "hbm" and w.buffer == "hbm" and a in y.writes)
        ):
            return True
    return any(_overlap(r, w) for r in x.reads for w in y.writes)


@settings(max_examples=150, deadline=None)
@given(traces())
def test_conflicting_instructions_never_overlap_in_time(trace):
    tl = simulate(trace, HW).timeline
    ins = trace.instructions
    for j in range(len(ins)):
        for i in range(j):
            if _conflict(ins[i], ins[j]):
                assert tl.start_ns[j] >= tl.end_ns[i] - 1e-9, (i, j)


def test_loop_tiles_rotate_over_the_buffer_count():
    b = TraceBuilder()
    inside = [b.sbuf("t", 128, 64, site="k.py:3", loop_depth=1) for _ in range(5)]
    outside = b.sbuf("w", 128, 64)
    slots = buffer_slots(b.allocs, 3)
    assert [slots[a.id] for a in inside] == [
        slots[inside[0].id],
        slots[inside[1].id],
        slots[inside[2].id],
        slots[inside[0].id],
        slots[inside[1].id],
    ]
    assert slots[outside.id] not in {slots[a.id] for a in inside}


def test_inner_sequential_loops_of_different_outer_iterations_do_not_share_a_barrier():
    b = TraceBuilder()
    outer, inner = b.loop("affine", 2), b.loop("sequential", 2)
    for o in range(2):
        t = b.sbuf(f"t{o}", 128, 2048)
        for i in range(2):
            lp = ((outer, "affine", o), (inner, "sequential", i))
            b.op("memset", "vector" if o == 0 else "scalar", writes=[b.whole(t)], free_size=2048, loops=lp)
    tl = simulate(b.build(), HW).timeline
    assert tl.start_ns[2] < tl.end_ns[1]  # outer iteration 1 runs beside outer iteration 0
    assert tl.start_ns[3] >= tl.end_ns[2]


def test_tiles_of_one_site_with_different_shapes_rotate_apart():
    # nl.matmul's lowering allocates the transposed operand in PSUM and its result at the same line:
    # each tile has its own rotating buffers, not a share of one rotation
    b = TraceBuilder()
    small, big = [], []
    for _ in range(4):
        small.append(b.psum("t", 128, 128, site="k.py:9", loop_depth=1))
        big.append(b.psum("r", 128, 512, site="k.py:9", loop_depth=1))
    slots = buffer_slots(b.allocs, 2)
    assert [slots[a.id] for a in small] == [slots[small[0].id], slots[small[1].id]] * 2
    assert [slots[a.id] for a in big] == [slots[big[0].id], slots[big[1].id]] * 2
    assert len({slots[a.id] for a in small + big}) == 4


def _transpose_copy_matmul(b: TraceBuilder, steps: int, loop: int | None):
    """Per step: TensorE transposes into PSUM, VectorE copies it to SBUF, TensorE multiplies it."""
    x = b.sbuf("x", 128, 128 * steps)
    out = b.psum("acc", 128, 512)
    ins = []
    for k in range(steps):
        lp = ((loop, "affine", k),) if loop is not None else ()
        tp = b.psum("tp", 128, 128, site="k.py:2", loop_depth=1)
        ts = b.sbuf("ts", 128, 128, site="k.py:3", loop_depth=1)
        ins.append(b.op("nc_transpose", "tensor", [b.whole(x, 512 * k, 512 * (k + 1))], [b.whole(tp)], 128, loops=lp))
        b.op("tensor_copy", "vector", [b.whole(tp)], [b.whole(ts)], 128, loops=lp)
        ins.append(b.op("nc_matmul", "tensor", [b.whole(ts), b.whole(out)], [b.whole(out)], 512, loops=lp))
    return ins


def test_the_compiler_moves_the_next_iterations_transpose_ahead_of_a_waiting_matmul():
    b = TraceBuilder()
    tp0, mm0, tp1, _ = (i.index for i in _transpose_copy_matmul(b, 2, b.loop("affine", 2)))
    tl = simulate(b.build(), HW).timeline
    assert tl.start_ns[tp1] < tl.start_ns[mm0]  # in the gap while VectorE copies step 0's transpose
    assert tl.start_ns[tp1] >= tl.end_ns[tp0]

    b = TraceBuilder()  # outside a loop the engine's stream stays in order
    _, mm0, tp1, _ = (i.index for i in _transpose_copy_matmul(b, 2, None))
    tl = simulate(b.build(), HW).timeline
    assert tl.start_ns[tp1] >= tl.end_ns[mm0]
