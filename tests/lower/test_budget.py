"""A pass that outgrows SBUF or PSUM is refused as it allocates (`LoweringState.charge`), with the
verdict the whole lowering gives: the same points lower, to the same program, and the same are refused."""

from __future__ import annotations

import dataclasses
import random

import pytest

from axon.lower import Rejected, lower
from axon.lower.emit import emit
from axon.lower.space import Space
from axon.lower.state import LoweringState
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


def _verdicts(name: str, preset: str, n: int) -> dict[str, str]:
    graph = get(name).graph(preset)  # a graph of its own: its memos (lowered passes) are not shared
    space, rng = Space(graph, HW), random.Random(0)
    out = {}
    for _ in range(n):  # drawn as the space's sample draws, before it rejects the points that do not fit
        point = {k.name: rng.choice(k.choices) for k in space.knobs}
        try:
            out[repr(sorted(point.items()))] = emit(lower(graph, point, HW))
        except Rejected as exc:
            out[repr(sorted(point.items()))] = "refused " + str(exc).split(":")[0]
    return out


@pytest.mark.parametrize(
    "name, preset", [("rmsnorm_matmul", "default"), ("layernorm_matmul", "default"), ("matmul", "default")]
)
def test_refusing_as_tiles_are_allocated_decides_as_lowering_everything_does(monkeypatch, name, preset):
    early = _verdicts(name, preset, 120)
    assert any(v.startswith("refused") for v in early.values()) and any(
        not v.startswith("refused") for v in early.values()
    )
    monkeypatch.setattr(LoweringState, "charge", lambda self, t: None)  # only the check after every pass
    whole = _verdicts(name, preset, 120)
    assert early.keys() == whole.keys()
    for key, source in early.items():
        if source.startswith("refused"):
            assert whole[key].startswith("refused"), key
        else:
            assert whole[key] == source, key


def test_a_refusal_as_tiles_are_allocated_says_its_figure_is_a_lower_bound():
    graph = get("rmsnorm_matmul").graph("default")
    with pytest.raises(Rejected, match=r"^psum: at least \d+ banks needed, 8 available$"):
        lower(graph, {"tile_n": 512, "psum_bufs": 4, "m_block": 4}, HW)


def test_a_point_that_takes_every_psum_bank_still_lowers():
    """Refused past the hardware's figure, not at it: this matmul point's one pass takes all 8 banks."""
    point = {"tile_m": 64, "m_block": 1, "tile_n": 512, "psum_bufs": 2, "loop_order": "kn4", "transpose": "dma"}
    prog = lower(get("matmul").graph("default"), point, HW)
    assert prog.point["_psum_banks"] == HW.memory.psum_banks == 8


def test_psum_banks_are_counted_in_the_hardware_files_bank_size():
    """The same 8 banks at half the size (1 KiB per partition): the accumulators shrink to 256 float32
    columns, one bank each, so the point that took all 8 still does, and one more buffer (12) is
    refused; counted in 2 KiB banks, they were 4 and 6 (12 tiles in 8 banks, accepted)."""
    memory = dataclasses.replace(HW.memory, psum_bytes_per_partition=HW.memory.psum_bytes_per_partition // 2)
    small_banks = dataclasses.replace(HW, memory=memory)
    point = {"tile_m": 64, "m_block": 1, "tile_n": 512, "psum_bufs": 2, "loop_order": "kn4", "transpose": "dma"}
    assert lower(get("matmul").graph("default"), point, small_banks).point["_psum_banks"] == 8
    with pytest.raises(Rejected, match=r"^psum: at least 12 banks needed, 8 available$"):
        lower(get("matmul").graph("default"), {**point, "psum_bufs": 3}, small_banks)
