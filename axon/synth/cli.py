"""`axon variants WORKLOAD`: the proved variants of a workload, their moves and proofs."""

from __future__ import annotations

import click


@click.command()
@click.argument("workload")
@click.option("--depth", default=4, show_default=True, type=click.IntRange(0, 8), help="Maximum moves per variant.")
@click.option("--timeout", "timeout_s", default=5.0, show_default=True, type=float, help="Seconds per proof.")
@click.option("--max-variants", default=200, show_default=True, type=click.IntRange(1, 10000))
@click.option("--shape", default=None, help="Bind dimensions, e.g. M=4096,K=1024 (proofs stay for all sizes).")
def variants(workload: str, depth: int, timeout_s: float, max_variants: int, shape: str | None) -> None:
    """Discover and prove algebraic variants of WORKLOAD (a built-in name or path.py:function)."""
    from axon.cli import parse_shape_option
    from axon.synth import discover
    from axon.workloads import get

    w = get(workload)
    dims = parse_shape_option(shape)
    graph = w.symbolic().bind(**dims) if dims else w.symbolic()
    found = discover(graph, max_depth=depth, timeout_s=timeout_s, max_variants=max_variants)
    for i, v in enumerate(found.variants):
        click.echo(f"== variant {i}  hash {v.hash}  moves {len(v.moves)}")
        for move, proof in zip(v.moves, v.proofs):
            click.echo(f"   {move.name}: {move.description}  [{proof.status} by {proof.method}, {proof.time_s * 1000:.1f} ms]")
        click.echo("\n".join("   " + line for line in v.graph.format().splitlines()))
    click.echo(
        f"# {len(found.variants)} variants; steps proved {found.count('proved')}, refuted {found.count('refuted')}, "
        f"unknown {found.count('unknown')}; {found.time_s:.2f} s"
    )
