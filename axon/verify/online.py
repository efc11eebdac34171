"""Online softmax (the FlashAttention merge) proved by its loop invariant, for every size.

State after a prefix of length P of each row: m = max, l = Σ exp(x - m), o = Σ exp(x - m) v.
Step: merging the next tile (length T) with the rescaling exp(m - m') gives the state of the prefix
P + T (proved for all P, T: the inductive step). Exit: o / l after the last tile is softmax(x) @ v.
Base: the first tile's state is the invariant by definition (the same formulas), so no query is
needed. The merge without rescaling is refuted. Nothing here is used by discovery.
"""

from __future__ import annotations

from dataclasses import dataclass

import axon.spec as ax
from axon.ir import Graph, trace
from axon.ir.dims import Dim
from axon.verify.proof import Result, prove


def _state(x, v):
    m = ax.max(x)
    e = ax.exp(x - m)
    return m, ax.sum(e), e @ v


@ax.spec(x="M P+T", v="P+T D")
def _invariant_after_tile(x, v):
    m, l, o = _state(x, v)
    return {"m": m, "l": l, "o": o}


def _merge(x, v, rescale: bool):
    P = x.shape[1] - ax_dim("T")
    m, l, o = _state(x[:, :P], v[:P, :])
    tile, vt = x[:, P:], v[P:, :]
    m_new = ax.maximum(m, ax.max(tile))
    e = ax.exp(tile - m_new)
    alpha = ax.exp(m - m_new) if rescale else 1.0
    return {"m": m_new, "l": l * alpha + ax.sum(e), "o": o * alpha + e @ vt}


def ax_dim(name: str) -> Dim:
    return Dim.sym(name)


@ax.spec(x="M P+T", v="P+T D")
def _step(x, v):
    return _merge(x, v, rescale=True)


@ax.spec(x="M P+T", v="P+T D")
def _step_without_rescale(x, v):
    return _merge(x, v, rescale=False)


@ax.spec(x="M N", v="N D")
def _exit_state(x, v):
    m, l, o = _state(x, v)
    return o / l


@ax.spec(x="M N", v="N D")
def _softmax_times_v(x, v):
    e = ax.exp(x - ax.max(x))
    return (e / ax.sum(e)) @ v


@dataclass(frozen=True)
class InvariantProof:
    """The three obligations of the online-softmax loop, and the refuted no-rescale merge."""

    step: Result
    exit: Result
    without_rescale: Result

    @property
    def proved(self) -> bool:
        return self.step.status == "proved" and self.exit.status == "proved"


def online_softmax_graphs() -> dict[str, Graph]:
    return {
        "invariant": trace(_invariant_after_tile, name="invariant"),
        "step": trace(_step, name="step"),
        "step_without_rescale": trace(_step_without_rescale, name="step_without_rescale"),
        "exit": trace(_exit_state, name="exit"),
        "softmax_v": trace(_softmax_times_v, name="softmax_v"),
    }


def prove_online_softmax(timeout_s: float = 10.0) -> InvariantProof:
    """Prove the online-softmax step preserves its invariant and its exit is softmax(x) @ v.

    >>> prove_online_softmax().proved
    True
    """
    g = online_softmax_graphs()
    return InvariantProof(
        step=prove(g["invariant"], g["step"], timeout_s=timeout_s),
        exit=prove(g["softmax_v"], g["exit"], timeout_s=timeout_s),
        without_rescale=prove(g["invariant"], g["step_without_rescale"], timeout_s=timeout_s),
    )
