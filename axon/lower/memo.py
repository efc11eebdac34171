"""`ReadMemo`: results of a deterministic function of a point's knobs, kept by the knobs it read.

Lowering a pass reads only some knobs (an elementwise pass never reads `tile_n`, a pass without
fused groups no `isel.*` knob, and which knobs are read can depend on the values of those read
before). The function gets the knobs as a `KnobReads`, which notes every knob looked up (and every
knob asked for that the point lacks); its result is stored under the values of exactly those knobs.
A later point that agrees on them makes the function read the same knobs, take the same branches and
return the same result, so the stored one is handed back: a tuner's neighbour that changed a knob
a pass does not read re-lowers only the passes that read it.

Errors the function raises for a point (`AxonError`: does not fit, cannot be lowered) are stored
the same way and raised again as a new exception of the same type and message; any other exception
is a bug and passes through uncached. Values are compared with their type (`True`, `1` and `1.0`
are different knob values), and a point whose read knobs cannot be hashed is computed afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from axon.errors import AxonError

T = TypeVar("T")

_ABSENT = object()  # a knob the point lacks (a lookup that raised KeyError or got the default)
_ALL = "\0all"  # the function iterated over the knobs: it depends on every one of them


class KnobReads(Mapping[str, Any]):
    """A read-only view of `knobs` that notes which knobs were looked up (`reads`)."""

    def __init__(self, knobs: Mapping[str, Any]) -> None:
        self._knobs = knobs
        self.reads: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        value = self._knobs.get(name, _ABSENT)
        self.reads[name] = value
        if value is _ABSENT:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        self.reads[_ALL] = True
        return iter(self._knobs)

    def __len__(self) -> int:
        self.reads[_ALL] = True
        return len(self._knobs)


def _key(knobs: Mapping[str, Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    """The typed values of `names` in `knobs` (every knob, sorted, when `names` holds `_ALL`)."""
    if _ALL in names:
        names = tuple(sorted(knobs))
        return (names, *((type(knobs[n]), knobs[n]) for n in names))
    return tuple((type(v), v) for v in (knobs.get(n, _ABSENT) for n in names))


class ReadMemo(Generic[T]):
    """`memo(knobs, compute)`: `compute(KnobReads(knobs))`, or the stored result of a point that
    agreed on every knob `compute` read for it. Keeps at most `limit` results (oldest dropped)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._tables: dict[tuple[str, ...], dict[tuple[Any, ...], tuple[bool, Any]]] = {}
        self._size = 0
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return self._size

    def __call__(self, knobs: Mapping[str, Any], compute: Callable[[KnobReads], T]) -> T:
        try:
            for names, table in self._tables.items():
                found = table.get(_key(knobs, names))
                if found is not None:
                    self.hits += 1
                    return _replay(found)
        except TypeError:  # an unhashable knob value: no memo for this point
            return compute(KnobReads(knobs))
        self.misses += 1
        view = KnobReads(knobs)
        try:
            result: tuple[bool, Any] = (True, compute(view))
        except AxonError as exc:
            result = (False, (type(exc), exc.args))
        names = tuple(sorted(view.reads))
        try:
            key = _key(knobs, names)
        except TypeError:
            return _replay(result)
        self._tables.setdefault(names, {})[key] = result
        self._size += 1
        if self._size > self.limit:
            self._evict()
        return _replay(result)

    def _evict(self) -> None:
        """Drop the oldest result of the largest table."""
        names = max(self._tables, key=lambda n: len(self._tables[n]))
        table = self._tables[names]
        del table[next(iter(table))]
        self._size -= 1
        if not table:
            del self._tables[names]


def _replay(found: tuple[bool, Any]) -> Any:
    ok, value = found
    if ok:
        return value
    kind, args = value
    raise kind(*args)
