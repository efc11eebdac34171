"""The machine keeps each operand's trace `Access` by its inputs: a trace with the cache is the trace
without it, and views that differ in anything `access` reads get their own record."""

from __future__ import annotations

import numpy as np

from axon import nki
from axon.lower import lower
from axon.lower.emit import emit
from axon.measure.backend import write_kernel
from axon.nki.allocation import Allocation
from axon.nki.machine import Machine
from axon.nki.memory import View
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


def test_a_trace_with_the_access_cache_is_the_trace_without_it(monkeypatch, tmp_path):
    prog = lower(get("attention").graph("small"), {"m_block": 2, "bufs": 2}, HW)
    fn = nki.load_kernel(f"{write_kernel(emit(prog), tmp_path)}:{prog.name}")
    specs = [(t.shape, t.dtype) for t in prog.inputs]

    def trace():  # one call site: the inputs' allocation sites are the caller's line
        return nki.trace(fn, *specs, hw=HW)

    cached = trace()
    with monkeypatch.context() as m:
        m.setattr(Machine, "access", Machine._access)
        fresh = trace()
    assert cached.to_json() == fresh.to_json()


def test_views_that_differ_in_what_access_reads_get_their_own_record():
    machine = Machine(HW, execute=False)
    tile = Allocation(3, "sbuf", "t", (128, 8, 64), np.dtype("float32"), 0, False)
    view = View.whole(tile).index((slice(None), 2))
    again = View.whole(tile).index((slice(None), 2))
    assert machine.access(view) is machine.access(again)
    assert machine.access(view) == machine._access(view)
    alias = Allocation(3, "sbuf", "t", (128, 64, 8), np.dtype("float32"), 0, False)  # same id, other layout
    swapped = View(alias, view.starts, view.steps, view.sizes, view.kept)
    assert machine.access(swapped) == machine._access(swapped) != machine.access(view)
    half = Allocation(3, "sbuf", "t", (128, 8, 64), np.dtype("bfloat16"), 0, False)
    narrow = View(half, view.starts, view.steps, view.sizes, view.kept)
    assert machine.access(narrow).byte_hi * 2 == machine.access(view).byte_hi
