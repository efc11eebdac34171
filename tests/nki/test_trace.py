"""Trace mode records every instruction with engines, operands, loops and lines, without arrays."""

import tracemalloc

import numpy as np

import axon.nki
from axon.target.trace import Trace
from tests.nki.helpers import KERNELS, kernel


def _line_of(text: str, module: str = "current_api") -> int:
    lines = (KERNELS / f"{module}.py").read_text().splitlines()
    return next(i + 1 for i, s in enumerate(lines) if text in s)


def test_matmul_trace_counts_and_operands():
    tr = axon.nki.trace(kernel("current_api", "matmul_tiled"), ((512, 256), "bfloat16"), ((512, 1024), "bfloat16"))
    assert isinstance(tr, Trace)
    # M/128=2, N/512=2, K/128=4: 16 matmuls, 2 loads each, one PSUM evacuation + store per output tile
    assert tr.count() == {"dma_copy": 36, "nc_matmul": 16, "tensor_copy": 4}
    mm = next(i for i in tr.instructions if i.opcode == "nc_matmul")
    assert (mm.engine, mm.partitions, mm.free_size, mm.dtype) == ("tensor", 128, 512, "bfloat16")
    assert mm.attr("moving_free") == 512 and mm.attr("stationary_free") == 128
    assert mm.line == _line_of("nisa.nc_matmul(acc[:mm, :nn]")
    st, mv = mm.reads
    assert (st.buffer, st.partition_lo, st.partition_hi, st.byte_hi - st.byte_lo) == ("sbuf", 0, 128, 256)
    assert (mv.byte_hi - mv.byte_lo, mv.nbytes, mv.stride_bytes) == (1024, 128 * 1024, 2)
    (w,) = mm.writes
    assert w.buffer == "psum" and w.byte_hi - w.byte_lo == 2048
    # loops: three nested affine loops, the matmul inside all of them
    assert [lp.kind for lp in tr.loops] == ["affine"] * 3 and [lp.trip_count for lp in tr.loops] == [2, 2, 4]
    assert [lid for lid, _, _ in mm.loops] == [0, 1, 2]
    later = [i for i in tr.instructions if i.opcode == "nc_matmul"][5]
    assert [it for _, _, it in later.loops] == [0, 1, 1]


def test_accumulate_flag_and_dma_directions():
    tr = axon.nki.trace(kernel("current_api", "matmul_tiled"), ((256, 128), "float32"), ((256, 512), "float32"))
    mms = [i for i in tr.instructions if i.opcode == "nc_matmul"]
    assert [m.attr("accumulate") for m in mms] == [False, True]
    assert len(mms[1].reads) == 3  # accumulating reads its PSUM destination too
    loads = [i for i in tr.instructions if i.opcode == "dma_copy" and i.attr("src") == "hbm"]
    stores = [i for i in tr.instructions if i.opcode == "dma_copy" and i.attr("dst") == "hbm"]
    assert len(loads) == 4 and len(stores) == 1
    a_load = loads[0]
    assert a_load.reads[0].buffer == "hbm" and a_load.reads[0].nbytes == 128 * 128 * 4
    assert tr.outputs == (stores[0].writes[0].alloc,)


def test_tile_in_loop_is_a_new_alloc_with_the_same_site():
    tr = axon.nki.trace(kernel("current_api", "matmul_tiled"), ((512, 128), "bfloat16"), ((512, 512), "bfloat16"))
    at_line = _line_of("at = nl.ndarray((TK, TM)")
    ats = [a for a in tr.allocs if a.site == f"current_api.py:{at_line}"]
    assert len(ats) == 4 and len({a.id for a in ats}) == 4 and all(a.loop_depth == 3 for a in ats)
    assert ats[0].bytes_per_partition == 128 * 2 and ats[0].partitions == 128


def test_trace_allocates_no_full_size_arrays():
    f = kernel("current_api", "matmul_tiled")
    tracemalloc.start()
    tr = axon.nki.trace(f, ((1024, 1024), "float32"), ((1024, 1024), "float32"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(tr) == 8 * 2 * 8 * 3 + 8 * 2 * 2
    assert peak < 1024 * 1024 * 4  # one input would be 4 MiB


def test_trace_accepts_shape_dtype_objects_and_arrays():
    class Spec:
        shape, dtype = (256, 128), "bfloat16"

    f = kernel("legacy_api", "softmax")
    a = axon.nki.trace(f, Spec())
    b = axon.nki.trace(f, np.zeros((256, 128), np.float32))
    assert len(a) == len(b) and a.instructions[0].dtype == "bfloat16" and b.instructions[0].dtype == "float32"
    assert {i.engine for i in a.instructions} >= {"dma", "vector", "scalar"}


def test_legacy_assignment_redirects_instead_of_copying():
    tr = axon.nki.trace(kernel("legacy_api", "matmul_tiled"), ((256, 128), "float32"), ((256, 512), "float32"))
    mms = [i for i in tr.instructions if i.opcode == "nc_matmul"]
    res = next(a for a in tr.allocs if a.buffer == "psum" and a.name != "")
    assert all(m.writes[0].alloc == mms[0].writes[0].alloc for m in mms)  # `res += ...` writes res itself
    assert all(m.attr("accumulate") for m in mms)
    assert res.buffer == "psum"
    assert tr.count()["memset"] == 1  # nl.zeros


def test_to_json_round_trips_as_text():
    tr = axon.nki.trace(kernel("legacy_api", "rmsnorm"), ((128, 256), "float32"), ((256,), "float32"))
    assert '"opcode": "activation"' in tr.to_json()


def test_legacy_attention_trace_loops_engines_and_hbm_strides():
    tr = axon.nki.trace(
        kernel("legacy_api", "attention"), ((200, 64), "bfloat16"), ((256, 64), "bfloat16"), ((256, 64), "bfloat16")
    )
    assert [lp.kind for lp in tr.loops] == ["affine", "sequential"] and tr.loops[1].parent == 0
    engines = {i.engine for i in tr.instructions}
    assert engines == {"dma", "tensor", "vector", "scalar"}
    c = tr.count()
    assert c["nc_matmul"] == 2 * 2 * 2 and c["nc_transpose"] == 2 * 2 and c["dma_transpose"] == 2 + 2 * 2
    # the ragged second query tile: 72 valid rows, masked instructions shrink to them
    last_store = [i for i in tr.instructions if i.opcode == "dma_copy" and i.attr("dst") == "hbm"][-1]
    w = last_store.writes[0]
    assert w.buffer == "hbm" and w.byte_lo == 128 * 64 * 2 and w.nbytes == 72 * 64 * 2
    exp = next(i for i in tr.instructions if i.opcode == "activation_reduce" and i.partitions == 72)
    assert exp.attr("op") == "exp" and exp.attr("reduce") is True


def test_shape_mismatch_is_reported_in_trace_mode():
    import pytest

    from axon.errors import NKIError

    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        nisa.memset(dst=u, value=0.0)
        nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.add)
        return a

    with pytest.raises(NKIError, match=r"test_trace.py:\d+: shape mismatch: tensor_tensor"):
        axon.nki.trace(k, ((128, 512), "float32"))
