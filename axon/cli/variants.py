"""`axon variants WORKLOAD`: the proved variants of a workload, their moves and proofs, and which of
them `axon tune` offers (numbered as tune numbers them) or rejects for floating point, and why."""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path
from typing import Any

import click

from axon.cli.common import shape_option_with
from axon.errors import AxonError, SpecError
from axon.ir import KERNEL_DTYPES
from axon.ir.trace import bind_dims
from axon.options import parse_shape_option
from axon.search import provenance
from axon.search.api import TUNING_EXCLUDED_MOVES, verified_variants, workload_graph
from axon.search.problem import LoweredProblem
from axon.search.request import TuneRequest
from axon.synth import discover
from axon.target import DEFAULT_HW, load_hw
from axon.workloads import get


@click.command()
@click.argument("workload")
@click.option("--depth", default=4, show_default=True, type=click.IntRange(0, 8), help="Maximum moves per variant.")
@click.option(  # 0, -1 and nan were taken as 0.05 s without a word
    "--timeout",
    "timeout_s",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds per proof, > 0.",
)
@click.option("--max-variants", default=200, show_default=True, type=click.IntRange(1, 10000))
@shape_option_with("Bind dimensions, e.g. M=4096,K=1024 (proofs stay for all sizes).")
@click.option("--preset", default="default", show_default=True, help="Shape preset tune's numbering is computed at.")
@click.option(
    "--dtype",
    default="float32",
    show_default=True,
    type=click.Choice(KERNEL_DTYPES),
    help="Kernel dtype the floating-point gate checks in.",
)
@click.option("--hw", default=DEFAULT_HW, show_default=True, help="Hardware file (which variants lower).")
def variants(
    workload: str, depth: int, timeout_s: float, max_variants: int, shape: str | None, preset: str, dtype: str, hw: str
) -> None:
    """Discover and prove algebraic variants of WORKLOAD (a built-in name or path.py:function).

    Each variant is numbered as `axon tune WORKLOAD --preset P --dtype D --hw H` reports it ("variant
    N", "-" and the reason when tune does not offer it), with its id (the hash tune's report prints).
    """

    if not math.isfinite(timeout_s):  # nan passes FloatRange's bound (every comparison with it is false)
        raise click.BadParameter(f"{timeout_s} is not a finite number of seconds", param_hint="'--timeout'")
    w = get(workload)
    dims = parse_shape_option(shape)
    load_hw(hw)  # a wrong --hw or --preset is refused here, not only when the numbering needs it
    w.dims(preset)
    # in the kernel's dtype, so each variant's id is the one tune reports at that --dtype
    graph = bind_dims(w.symbolic(dtype), dims, w.fn.__name__)  # a dimension the spec does not have is refused
    # a spec of 30 ops takes the whole budget twice (this search, then tune's for its numbering):
    # minutes without a word looked hung
    click.echo(
        f"axon: proving the variants of {w.fn.__name__} (each proof up to {timeout_s:g} s, the search up to "
        f"{DISCOVERY_BUDGET_S:g} s), then numbering them as tune does (as long again)",
        err=True,
    )
    found = discover(graph, max_depth=depth, timeout_s=timeout_s, max_variants=max_variants)
    numbers, why_not, rejected, note = _tune_numbering(w, preset, dtype, dims, hw)
    for i, v in enumerate(found.variants):
        # numbered as `axon tune` numbers it ("variant N" in its report); "-" when tune does not offer it
        number = numbers.get(v.hash, "-") if not note else i
        label = "" if v.hash in numbers else f"  [not tuned: {why_not.get(v.hash, _untuned(v, note))}]"
        click.echo(f"== variant {number}  id {v.hash[:8]}  moves {len(v.moves)}{label}")
        for move, proof in zip(v.moves, v.proofs):
            click.echo(
                f"   {move.name}: {move.description}  [{proof.status} by {proof.method}, {proof.time_s * 1000:.1f} ms]"
            )
        click.echo("\n".join("   " + line for line in v.graph.format().splitlines()))
    if rejected:
        click.echo(f"# rejected for floating point in {dtype} ({len(rejected)}):")
        for r in rejected:
            click.echo(f"#   id {r.variant.hash[:8]}  {r.describe()}")
    click.echo(
        f"# {len(found.variants)} variants; steps proved {found.count('proved')}, refuted {found.count('refuted')}, "
        f"unknown {found.count('unknown')}; {found.time_s:.2f} s"
        + (f" (stopped at {found.stopped}: more variants may exist)" if found.stopped else "")
        + f"; tune offers {len(numbers)}"
        + (f" (from its own search, to depth {TUNE_DEPTH})" if depth != TUNE_DEPTH and not note else "")
        + (f" ({note})" if note else "")
    )


DISCOVERY_BUDGET_S = inspect.signature(discover).parameters["budget_s"].default
TUNE_DEPTH = TuneRequest.depth  # the depth `axon tune` discovers to, whatever --depth lists here


def _untuned(variant: Any, note: str) -> str:

    excluded = sorted({m.name for m in variant.moves} & TUNING_EXCLUDED_MOVES)
    if excluded:
        return f"uses {', '.join(excluded)}, which tune excludes"
    return note or "beyond tune's search (depth or the 24-variant cap)"


def _tune_numbering(
    w: Any, preset: str, dtype: str, dims: dict[str, int], hw: str
) -> tuple[dict[str, int], dict[str, str], list[Any], str]:
    """What `axon tune` offers: {hash: tune's variant number}, {hash: why not}, the floating-point
    rejections, and a note when the numbering cannot be computed (no sizes bound)."""

    try:
        graph = workload_graph(w, preset, dtype, dims)
    except AxonError as exc:
        return {}, {}, [], f"tune's numbering needs sizes: {exc}"
    rejected: list[Any] = []
    kept = verified_variants(graph, rejected=rejected)  # tune's own depth and cap, whatever --depth lists
    problem = LoweredProblem(w.name, graph, load_hw(hw), kept, dtype)
    numbers = {v.hash: i for i, v in enumerate(problem.variants)}
    why_not = {h: f"the lowering cannot express it: {reason}" for h, reason in problem.skipped}
    why_not.update({r.variant.hash: f"floating point: {r.reason}" for r in rejected})
    return numbers, why_not, rejected, ""


@click.command()
@click.argument("kernel_file", type=click.Path(dir_okay=False))
def verify(kernel_file: str) -> None:
    """Check a kernel file `axon tune` wrote again, from what it says about itself: trace its spec,
    prove its variant's moves again with Z3, lower its point again (the code must be the file's,
    byte for byte) and run it in the emulator against the float64 reference, on random and
    adversarial inputs. Exit 0 when all of that holds, 1 when something does not."""
    if not Path(kernel_file).expanduser().is_file():
        raise SpecError(f"{kernel_file}: no such kernel file")
    verdict = provenance.verify(kernel_file)
    for line in verdict.lines:
        click.echo(line)
    for failure in verdict.failures:
        click.echo(f"FAILED: {failure}")
    click.echo(f"{kernel_file}: {'verified' if verdict.ok else 'does NOT verify'}")
    if not verdict.ok:
        sys.exit(1)
