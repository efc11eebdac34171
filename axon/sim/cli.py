"""`axon nki profile FILE.py:FN --input a=bfloat16[128,512] --hw trn1`: trace, simulate, report.

A thin layer over `axon.nki.trace` and `axon.sim.simulate`; the `nki` group (axon/nki/cli.py)
attaches this command. Heavy imports happen inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("profile")
@click.argument("kernel")
@click.option("--input", "inputs", multiple=True, help="NAME=DTYPE[SHAPE], e.g. a=bfloat16[128,512]; once per argument.")
@click.option("--hw", default="trn1", show_default=True, help="Hardware file: a built-in name or a YAML path.")
@click.option("--out", "out_dir", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Directory for the timeline files (<fn>.perfetto.json, <fn>.png).")
@click.option("--no-png", is_flag=True, help="Skip the PNG Gantt chart.")
def profile(kernel: str, inputs: tuple[str, ...], hw: str, out_dir: str, no_png: bool) -> None:
    """Time KERNEL (FILE.py:FN) on the simulated NeuronCore and write its timeline."""
    from axon.nki import load_kernel, trace
    from axon.nki.cli import parse_input_spec
    from axon.sim import simulate
    from axon.target import load_hw

    spec = load_hw(hw)
    fn = load_kernel(kernel)
    args = [_as_spec(parse_input_spec(text)) for text in inputs]
    timing = simulate(trace(fn, *args, hw=spec), spec)
    click.echo(timing.summary())
    name = kernel.rpartition(":")[2] or "kernel"
    out = Path(out_dir)
    written = [timing.timeline.to_perfetto(out / f"{name}.perfetto.json")]
    if not no_png:
        written.append(timing.timeline.to_png(out / f"{name}.png"))
    for path in written:
        click.echo(f"wrote {path}")


def _as_spec(parsed):
    """`parse_input_spec` gives (name, shape, dtype) or an object with .shape/.dtype: keep (shape, dtype)."""
    if hasattr(parsed, "shape") and hasattr(parsed, "dtype"):
        return parsed
    if isinstance(parsed, tuple) and len(parsed) == 3:
        _, shape, dtype = parsed
        return (tuple(shape), dtype)
    return parsed
