"""`View.index`'s fast path for int and slice keys gives the view the general path gives, and leaves
every other key (and every error) to the general path."""

from __future__ import annotations

import numpy as np
import pytest

from axon.errors import NKIError
from axon.nki.allocation import Allocation
from axon.nki.machine import LoopVar
from axon.nki.memory import View


def _fields(v: View) -> tuple:
    return (v.alloc, v.starts, v.steps, v.sizes, v.kept, v.vars, v.vpos, v.shape, v.maybe_oob)


def _general(monkeypatch, view: View, key):
    with monkeypatch.context() as m:
        m.setattr(View, "_index_plain", lambda self, key: None)
        return view.index(key)


def _keys(rng: np.random.Generator, shape: tuple[int, ...]):
    for _ in range(300):
        key = []
        for n in shape[: int(rng.integers(1, len(shape) + 1))]:
            kind = rng.integers(4)
            if kind == 0:
                key.append(int(rng.integers(-n, n)))
            elif kind == 1:
                key.append(LoopVar(int(rng.integers(n)), 0))
            elif kind == 2:
                lo = int(rng.integers(-n, n))
                key.append(slice(lo, int(rng.integers(-n, n + 1)), int(rng.integers(1, 4))))  # within the axis
            else:
                key.append(slice(None))
        yield tuple(key) if len(key) > 1 or rng.random() < 0.5 else key[0]


@pytest.mark.parametrize("kind,par_axis", [("sbuf", 0), ("hbm", None)])
def test_int_and_slice_keys_give_the_general_paths_view(monkeypatch, kind, par_axis):
    alloc = Allocation(1, kind, "t", (8, 6, 10), np.dtype("float32"), par_axis, False)
    rng = np.random.default_rng(0)
    for base in (View.whole(alloc), View.whole(alloc).index((slice(1, 7, 2), slice(None), slice(2, 9)))):
        for key in _keys(rng, base.shape):
            fast = base._index_plain(key if isinstance(key, tuple) else (key,))
            assert fast is not None, key
            assert _fields(fast) == _fields(_general(monkeypatch, base, key)), key


def test_other_keys_and_errors_go_to_the_general_path():
    alloc = Allocation(1, "sbuf", "t", (8, 10), np.dtype("float32"), 0, False)
    view = View.whole(alloc)
    others = [(8,), (-9,), (slice(None), 10), (Ellipsis, 1), (True,), (np.int64(1),), (slice(None, None, -1),)]
    for key in [*others, (slice(0, 9),), (slice(None), slice(-11, None))]:
        assert view._index_plain(key) is None, key
    with pytest.raises(NKIError, match="out of range"):
        view.index((8,))
    with pytest.raises(NKIError, match=r"slice 0:9 of axis 0 of <sbuf tensor t \[8, 10\] float32> is past its end"):
        view.index((slice(0, 9),))
    with pytest.raises(NKIError, match="negative slice steps"):
        view.index((slice(None, None, -1),))
    assert view.index((Ellipsis, 1)).shape == (8,)
