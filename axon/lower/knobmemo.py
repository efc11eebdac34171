"""Results of a pure function of a point's knobs, remembered by the knobs it actually read.

The sampler lowers thousands of candidate points per tune, and most of them share the knobs one
pass of the lowering reads (a mutation or a neighbour changes one knob; `lower` retries a point
that did not fit SBUF, and a pass with a matmul reads nothing the retry changes). `remembered`
runs the function on a view of the knobs that records which knobs it read, in the order it first
read them, and files the result under those values in a decision tree: the first knob read is
always the same one (nothing before it depends on a knob), the value read decides the next, and so
on, so a later point that has the same values for the knobs on one path gets the same result
without running the function. That is exact for a function that is deterministic given its other
arguments (the caller keys those) and reads the knobs only through the mapping it is handed; a run
that iterates the mapping (reads every knob) is not remembered. It does not memoize anything by
approximate equality: values are told apart by type as well (True is not 1 here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from axon.errors import AxonError

T = TypeVar("T")

_MISSING = object()  # a knob the point does not have (reading it raised KeyError)


class KnobReads(Mapping[str, Any]):
    """`knobs`, read-only, recording the first read of each knob (`reads`: name -> value or
    `_MISSING`, in the order of reading); `whole` once anything iterated it or took its length."""

    def __init__(self, knobs: Mapping[str, Any]) -> None:
        self._knobs = knobs
        self.reads: dict[str, Any] = {}
        self.whole = False

    def __getitem__(self, name: str) -> Any:
        try:
            value = self._knobs[name]
        except KeyError:
            self.reads.setdefault(name, _MISSING)
            raise
        self.reads.setdefault(name, value)
        return value

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self._knobs)

    def __len__(self) -> int:
        self.whole = True
        return len(self._knobs)


def tree_of(graph: Any, name: str, owners: tuple[Any, ...], values: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The decision tree for `name` in `graph`'s memo, one per combination of the function's other
    arguments: `owners` told apart by identity (kept in the memo, so that their ids stay theirs),
    `values` by equality."""
    trees = graph.memo(("knob_trees", name), dict)
    key = (tuple(id(o) for o in owners), values)
    entry = trees.get(key)
    if entry is None or any(a is not b for a, b in zip(entry[0], owners)):
        entry = trees[key] = (owners, {})
    return entry[1]


def _label(value: Any) -> tuple[type, Any]:
    return (type(value), value)


def remembered(tree: dict[str, Any], knobs: Mapping[str, Any], compute: Callable[[Mapping[str, Any]], T]) -> T:
    """`compute(knobs)`, or what it returned (or raised, for an `AxonError`) for earlier knobs that
    agree with `knobs` on every knob it read. `tree` is the caller's, one per combination of the
    function's other arguments; the caller must copy a mutable result before changing it."""
    node = tree
    try:
        while "key" in node:
            node = node["next"][_label(knobs.get(node["key"], _MISSING))]
    except (KeyError, TypeError):  # not seen (or an unhashable value: never remembered)
        node = {}
    if "value" in node:
        return node["value"]
    if "error" in node:
        kind, args = node["error"]
        raise kind(*args)
    reads = KnobReads(knobs)
    try:
        value = compute(reads)
    except AxonError as exc:
        _file(tree, reads, {"error": (type(exc), exc.args)})
        raise
    _file(tree, reads, {"value": value})
    return value


def _file(tree: dict[str, Any], reads: KnobReads, outcome: dict[str, Any]) -> None:
    """Store `outcome` at the path of `reads` (nothing when the run read the whole mapping or a
    value that cannot be a key)."""
    if reads.whole:
        return
    node = tree
    try:
        for name, value in reads.reads.items():
            if "value" in node or "error" in node or node.setdefault("key", name) != name:
                return  # a path that disagrees with an earlier run: the function is not what we assume
            node = node.setdefault("next", {}).setdefault(_label(value), {})
    except TypeError:
        return
    if "key" not in node and "value" not in node and "error" not in node:
        node.update(outcome)
