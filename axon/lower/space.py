"""`Space(variant, hw)`: the schedule knobs of a variant on a hardware file, as plain data.

Knobs (each a name and a tuple of choices, so Optuna can sample them):
`fusion` (which intermediates stay on chip: all, all but matmul boundaries, none), `tile_m`
(partitions per row tile), `m_block` (row tiles sharing each moving tile: M-blocking), `tile_n`
(moving free size), `tile_k` (contraction tile), `bufs` (rotating buffers for DMA'd tiles),
`psum_bufs` (PSUM accumulators per row tile), `loop_order` (`nk`: each n tile runs its whole
contraction before the next; `kn2`/`kn4`: K outer over a group of 2 or 4 n tiles that accumulate at
once in separate PSUM banks, their moving tiles brought by one DMA per K tile), `transpose`
(stationary operands transposed on TensorE or by DMA; inputs already laid out [K, M] need neither),
`weights` (moving operands streamed per tile or resident in SBUF per batch), `evac` (PSUM evacuated
by VectorE or ScalarE), `skew` (the row-block loop software-pipelined by one block: block r+1's
stationary operand prepared before block r's matmuls, `axon.lower.skew`), `accumulate` (where a
graph has x @ w + y @ v or (x @ a) @ b: `shared` accumulates the two products in one PSUM bank and
makes x @ a already transposed for its consumer, `separate` lowers each matmul on its own; see
`matsum`), `fold` (consecutive rows per partition, for
graphs elementwise over rows: `axon.lower.fold`; `split`: each row cut into shorter rows, the other
way), `offload` (VectorE tensor_scalars moved to ScalarE: `axon.lower.engines`), `interleave` (a
fused group's steps issued step-major over the m_block row tiles, so engines overlap across tiles;
with m_block=1, over column windows of the row tile instead), `moments` (where a row's mean and
centred sum of squares are computed: one read with bn_stats/bn_aggr, or two passes;
`axon.lower.moments`), and `isel.<group>` (the verified instruction alternatives of each fused
elementwise group). A graph
of the attention form (`axon.lower.attention`) also gets `softmax` (`online`: the flash-style loop
nest, `rows`: the row-block lowering) and that nest's knobs (`kv_chunk`, `scores_copy`, `p_evac`,
`attn_pipeline`, `attn_store`). Knobs that cannot matter for a graph (tile_n without a matmul) are
left out. The default point is the documented heuristic: fused, largest legal tiles, no blocking,
n-outer loop order, single buffers, TensorE transposes, streamed weights, no
fold/split/offload/interleave, and the online softmax where it applies.
It does not time anything; the tuner ranks points.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from axon.errors import AxonError
from axon.lower.attention import ATTENTION_KNOBS, match_attention
from axon.lower.engines import OFFLOAD_CHOICES
from axon.lower.fold import SPLIT_CHOICES, fold_choices, split_blocker
from axon.lower.fused import alternatives, groups_of
from axon.lower.lowering import graph_of, lower
from axon.lower.matsum import shared_sums, transposed_products
from axon.lower.moments import MOMENTS_CHOICES, match_moments
from axon.lower.passes import materializable, matmul_cuts, normalize, split
from axon.lower.roles import LoweringError


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """A choice for every knob. `Point.of({"tile_m": 64})`; `point["tile_m"]`."""

    knobs: tuple[tuple[str, Any], ...]

    @staticmethod
    def of(values: Mapping[str, Any]) -> Point:
        return Point(tuple(sorted(values.items())))

    def __getitem__(self, name: str) -> Any:
        return dict(self.knobs)[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.knobs)


class Space:
    """The knobs of `variant` (a Graph or an object with `.graph`) on `hw`.

    >>> from axon.workloads import get
    >>> from axon.target import load_hw
    >>> space = Space(get("rmsnorm_matmul").graph("small"), load_hw("trn1"))
    >>> space.validate(space.default_point()) is None
    True
    >>> space.validate(Point.of({**space.default_point().as_dict(), "tile_k": 256}))
    'knob tile_k: 256 is not one of (128, 64)'
    """

    def __init__(self, variant: Any, hw: Any, isel: Mapping[str, int] | None = None) -> None:
        self.variant = variant
        self.graph = normalize(graph_of(variant), hw.memory.partitions)
        self.hw = hw
        g = self.graph
        has_mm = any(n.op == "matmul" for n in g.nodes)
        fusions: list[Any] = ["fused"]
        seen = {frozenset(split(g, set())[1])}
        for name, cuts in (("split_matmuls", matmul_cuts(g)), ("unfused", frozenset(materializable(g)))):
            try:
                key = split(g, cuts)[1]
            except LoweringError:
                continue
            if key not in seen:
                seen.add(key)
                fusions.append(name)
        pmax = hw.memory.partitions
        knobs = [
            Knob("fusion", tuple(fusions)),
            Knob("tile_m", (pmax, pmax // 2, pmax // 4)),
            Knob("m_block", (1, 2, 4)),
            Knob("bufs", (1, 2, 3)),
        ]
        if not has_mm:  # VectorE tensor_scalars moved to ScalarE (an elementwise kernel's idle engine),
            knobs.append(Knob("offload", OFFLOAD_CHOICES))  # fused steps issued step-major over a block
            knobs.append(Knob("interleave", (False, True)))
        if match_moments(g):  # a row's mean and centred sum of squares: two passes or bn_stats/bn_aggr
            knobs.append(Knob("moments", MOMENTS_CHOICES))
        folds = fold_choices(g)  # every value elementwise over rows: short rows may share a partition
        if len(folds) > 1:
            knobs.append(Knob("fold", folds))
        if folds and split_blocker(g) is None:  # ... or rows be cut shorter (more row blocks in flight)
            knobs.append(Knob("split", SPLIT_CHOICES))
        needs_transpose = has_mm or any(n.op == "transpose" for n in g.nodes)
        if has_mm:
            knobs += [
                Knob("tile_n", (hw.tensor_engine.moving_fmax, 256, 128)),
                Knob("tile_k", (hw.tensor_engine.rows, hw.tensor_engine.rows // 2)),
                Knob("psum_bufs", (1, 2)),
                Knob("loop_order", ("nk", "kn2", "kn4")),
                Knob("weights", ("stream", "resident")),
                Knob("evac", ("vector", "scalar")),
                Knob("skew", (False, True)),  # the row-block loop software-pipelined (`axon.lower.skew`)
            ]
        if has_mm and any(shared_sums(p.graph) or transposed_products(p.graph) for p in split(g, set())[0]):
            knobs.append(Knob("accumulate", ("shared", "separate")))
        if needs_transpose:
            knobs.append(Knob("transpose", ("pe", "dma")))
        if match_attention(self.graph) is not None:
            knobs += [Knob(name, choices) for name, choices in ATTENTION_KNOBS.items()]
        self.isel = dict(isel) if isel is not None else self._isel_choices()
        for group, n in sorted(self.isel.items()):
            knobs.append(Knob(f"isel.{group}", tuple(range(n))))
        self.knobs: tuple[Knob, ...] = tuple(knobs)

    def _isel_choices(self) -> dict[str, int]:
        """Number of verified alternatives per fused group of the fused passes (groups with >= 2)."""
        out: dict[str, int] = {}
        for p in split(self.graph, set())[0]:
            # the groups with and without the row moments computed by bn_stats (knob `moments`)
            dropped = frozenset(n for m in match_moments(p.graph) for n in (m.total, m.mean, m.square, m.sumsq))
            for drop in dict.fromkeys((frozenset(), dropped)):
                for grp in groups_of(p.graph, drop):
                    n = len(alternatives(p.graph, grp.sink, drop))
                    key = f"g{p.origin[grp.sink]}"
                    if n >= 2:
                        out[key] = max(n, out.get(key, 0))
        return out

    def isel_alternatives(self) -> dict[str, list[str]]:
        """For the report: each fused group's verified alternatives, described."""
        out: dict[str, list[str]] = {}
        for p in split(self.graph, set())[0]:
            for grp in groups_of(p.graph):
                out[f"g{p.origin[grp.sink]}"] = [a.describe() for a in alternatives(p.graph, grp.sink)]
        return out

    # points --------------------------------------------------------------------------------------
    def default_point(self) -> Point:
        return Point.of({k.name: k.choices[0] for k in self.knobs})

    def sample(self, rng: random.Random | int | None = None, max_tries: int = 200) -> Point:
        """A random valid point (uniform over knobs, rejection of invalid ones)."""
        rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        for _ in range(max_tries):
            p = Point.of({k.name: rng.choice(k.choices) for k in self.knobs})
            if self.validate(p) is None:
                return p
        return self.default_point()

    def validate(self, point: Point | Mapping[str, Any]) -> str | None:
        """None if `point` lowers and fits SBUF/PSUM on this hardware; otherwise the reason."""
        values = point.as_dict() if isinstance(point, Point) else dict(point)
        for k in self.knobs:
            if k.name not in values:
                return f"knob {k.name}: missing"
            if values[k.name] not in k.choices:
                return f"knob {k.name}: {values[k.name]!r} is not one of {k.choices}"
        try:
            lower(self.variant, values, self.hw)
        except AxonError as exc:  # Rejected (does not fit) or LoweringError (cannot be lowered)
            return str(exc)
        return None

    def _schedule_knobs(self) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs if not k.name.startswith("isel."))

    def points(self) -> Iterator[Point]:
        """Every combination of the schedule knobs (isel knobs at their first choice)."""
        ks = self._schedule_knobs()
        extra = {k.name: k.choices[0] for k in self.knobs if k.name.startswith("isel.")}
        for combo in itertools.product(*(k.choices for k in ks)):
            yield Point.of({**dict(zip((k.name for k in ks), combo)), **extra})

    def census(self) -> tuple[int, dict[str, int]]:
        """(valid schedule points, rejected points by reason kind), enumerating every combination."""
        valid = 0
        rejected: dict[str, int] = {}
        for p in self.points():
            reason = self.validate(p)
            if reason is None:
                valid += 1
            else:
                kind = reason.split(":", 1)[0]
                rejected[kind] = rejected.get(kind, 0) + 1
        return valid, rejected

    def count(self) -> int:
        """Valid points: valid schedules times the independent instruction alternatives."""
        valid, _ = self.census()
        for k in self.knobs:
            if k.name.startswith("isel."):
                valid *= len(k.choices)
        return valid
