"""`axon verify FILE`: a kernel file axon tune wrote is checked again from what it says about itself."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from axon.errors import AxonError, SpecError
from axon.search.api import TuneRequest, tune
from axon.search.problem import LoweredProblem
from axon.search.provenance import MARKER, delivered, verify
from axon.search.variants import verified_variants, workload_graph
from axon.target import load_hw
from axon.workloads import get
from tests.conftest import refused


def test_a_tuned_kernel_verifies_and_an_edited_or_damaged_one_does_not(tmp_path):
    spec = tmp_path / "specs.py"
    spec.write_text('import axon.spec as ax\n\n@ax.spec(x="M N", s="1 1")\ndef scale(x, s):\n    return x * s\n')
    out = tmp_path / "k.py"
    report = tune(
        TuneRequest.make(
            f"{spec}:scale", shape={"M": 256, "N": 512}, trials=2, workdir=tmp_path / "w", out=out, track=False
        )
    )
    assert report.kernel_path == str(out)
    verdict = verify(out)
    assert verdict.ok, verdict
    assert any(line.startswith("code: what Axon emits") for line in verdict.lines)
    assert any(line.startswith("numerics: max rel err") for line in verdict.lines)
    text = out.read_text()
    # an edited kernel: the code is no longer what Axon emits for its variant and point
    edited = tmp_path / "edited.py"
    edited.write_text(text.replace("nl.multiply", "nl.add", 1))
    assert "nl.multiply" in text and not verify(edited).ok
    assert "not what Axon emits" in verify(edited).failures[0]
    # a block that names another variant: not found again
    info = json.loads(text.split(MARKER + "\n")[1].splitlines()[0][2:])
    other = tmp_path / "other.py"
    other.write_text(text.replace(info["variant"], "0" * len(info["variant"])))
    assert "is not found again" in verify(other).failures[0]
    # the spec edited since: "not found again" alone read as a proof that failed
    spec.write_text(spec.read_text().replace("x * s", "x * s * 2.0"))
    assert "the spec traces to another graph" in verify(out).failures[0] and "edited since?" in verify(out).failures[0]
    damaged = tmp_path / "damaged.py"
    damaged.write_text(text.replace('"point"', '"pint"'))
    with pytest.raises(SpecError, match="damaged"):
        verify(damaged)
    refused("verify", str(spec), fragments=("not a kernel file axon tune wrote",))
    refused("verify", str(tmp_path / "none.py"), fragments=("no such kernel file",))


def test_each_move_of_the_kernels_variant_is_proved_again(tmp_path):
    hw = load_hw("trn1")
    graph = workload_graph(get("rmsnorm_matmul"), "small", "float32", None)
    variants = verified_variants(graph)
    problem = LoweredProblem("rmsnorm_matmul", graph, hw, variants, "float32")
    index = next(i for i, v in enumerate(variants) if v.moves)
    point = problem.default_point(index)
    request = SimpleNamespace(workload="rmsnorm_matmul", preset="small", depth=4)
    path = tmp_path / "k.py"
    path.write_text(delivered(problem.build(point), problem, point, request))
    assert f"# proved {variants[index].moves[0].name} (" in path.read_text()
    verdict = verify(path)
    assert verdict.ok, verdict
    proved = [line for line in verdict.lines if line.startswith("proved again: ")]
    assert [line.split()[2] for line in proved] == [m.name for m in variants[index].moves]
    # the hardware file it names has changed since: refused, not checked against another machine
    yaml = tmp_path / "my.yaml"
    yaml.write_text(Path(hw.source).read_text().replace("name: trn1", "name: mine"))
    mine = load_hw(str(yaml))
    problem = LoweredProblem("rmsnorm_matmul", graph, mine, variants, "float32")
    path.write_text(delivered(problem.build(point), problem, point, request))
    yaml.write_text(yaml.read_text() + "\n# recalibrated\n")
    with pytest.raises(SpecError, match="gone or has changed"):
        verify(path)


def test_a_kernel_tuned_on_a_hardware_file_named_relatively_verifies_from_another_directory(tmp_path, monkeypatch):
    """`--hw mine.yaml` was written into the block as given: verify from any other directory said the file
    was "gone or has changed since" (it is where it was, unchanged)."""
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "mine.yaml").write_text(Path(load_hw("trn1").source).read_text().replace("trn1", "mine"))
    monkeypatch.chdir(tmp_path / "tuned")
    graph = workload_graph(get("softmax"), "small", "float32", None)
    variants = verified_variants(graph)
    problem = LoweredProblem("softmax", graph, load_hw("mine.yaml"), variants, "float32")
    point = problem.default_point(0)
    path = tmp_path / "k.py"
    path.write_text(
        delivered(problem.build(point), problem, point, SimpleNamespace(workload="softmax", preset="small", depth=4))
    )
    monkeypatch.chdir(tmp_path)
    assert verify(path).ok


def test_a_variant_found_past_the_discovery_budget_of_a_slower_machine_still_verifies(tmp_path, monkeypatch):
    # verify ran discovery under tune's 50 s budget: a kernel whose variant a tune found late was
    # "not found again" when the verifying machine was slower; the search's order does not depend on
    # the clock, so verify searches without a budget and stops at the variant
    from axon.search import variants as variants_module
    from axon.synth.discover import discover

    graph = workload_graph(get("rmsnorm_matmul"), "small", "float32", None)
    variants = verified_variants(graph)
    index = max(i for i, v in enumerate(variants) if v.moves)
    upto = verified_variants(graph, budget_s=float("inf"), until=variants[index].hash)
    assert [v.hash for v in upto] == [v.hash for v in variants[: index + 1]]
    assert len(verified_variants(graph, budget_s=0.0)) == 1  # a cut search: the spec as written alone
    problem = LoweredProblem("rmsnorm_matmul", graph, load_hw("trn1"), variants, "float32")
    point = problem.default_point(index)
    path = tmp_path / "k.py"
    request = SimpleNamespace(workload="rmsnorm_matmul", preset="small", depth=4)
    path.write_text(delivered(problem.build(point), problem, point, request))

    def slow_machine(*args, budget_s=50.0, **kwargs):
        return discover(*args, budget_s=0.0 if budget_s == 50.0 else budget_s, **kwargs)

    monkeypatch.setattr(variants_module, "discover", slow_machine)
    verdict = verify(path)
    assert verdict.ok, verdict


def test_a_hand_edited_block_is_refused_naming_the_file_and_field(tmp_path):
    """A block whose depth or point.variant is not a count was a ValueError traceback (int('x')); a
    point.variant past the variants said "the spec traces to another graph" naming the block's own
    variant; a point that does not lower was refused without the file's name."""
    graph = workload_graph(get("softmax"), "small", "float32", None)
    variants = verified_variants(graph)
    problem = LoweredProblem("softmax", graph, load_hw("trn1"), variants, "float32")
    point = problem.default_point(0)
    request = SimpleNamespace(workload="softmax", preset="small", depth=4)
    text = delivered(problem.build(point), problem, point, request)
    path = tmp_path / "k.py"

    def edited(old: str, new: str) -> Path:
        assert old in text
        path.write_text(text.replace(old, new))
        return path

    for old, new, field in (
        ('"depth": 4', '"depth": "x"', "depth"),
        ('"variant": 0}', '"variant": "a"}', "point.variant"),
        ('"variant": 0}', '"variant": -1}', "point.variant"),
    ):
        with pytest.raises(SpecError, match=f"k.py: its axon block is damaged \\(field {field} must be"):
            verify(edited(old, new))
    past = len(variants)
    failures = verify(edited('"variant": 0}', f'"variant": {past}}}')).failures
    assert failures == (
        f"variant {variants[0].hash[:8]} (as written) is variant 0 here, the point says variant {past} (edited?)",
    )
    with pytest.raises(AxonError, match="k.py: point cannot be lowered: knob tile_m"):
        verify(edited('"tile_m": 128', '"tile_m": 96'))
    refused("verify", str(edited('"depth": 4', '"depth": "x"')), fragments=(f"{path}: its axon block is damaged",))
