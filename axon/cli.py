"""The `axon` command: a thin layer over the Python API.

Subcommands owned by other packages are loaded lazily (so `axon workloads` does not pay for z3,
optuna or mlflow imports). Any `AxonError` becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from axon.errors import AxonError
from axon.shipped import cost_model_ref

# name -> "module:attribute" of a click command living beside the code it drives
LAZY_COMMANDS = {
    "nki": "axon.nki.cli:nki",
    "variants": "axon.synth.cli:variants",
    "tune": "axon.search.cli:tune",
    "sweep": "axon.search.cli:sweep",
    "ui": "axon.track.cli:ui",
    "runs": "axon.track.cli:runs",
}


# group name -> {subcommand: "module:attribute"} attached to a lazily loaded group by its users
LAZY_SUBCOMMANDS = {"nki": {"profile": "axon.sim.cli:profile"}}


# option name -> click callback that turns a ref into what the command's code loads: `--cost-model trn1`
# or `models/axon-costmodel-trn1.json` reach the model shipped in the package from any directory.
# Given here, for every lazily loaded command that has the option and no callback of its own.
REF_OPTIONS = {"cost_model": lambda ctx, param, value: cost_model_ref(value)}


class AxonGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, _, attr = LAZY_COMMANDS[name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            for sub, target in LAZY_SUBCOMMANDS.get(name, {}).items():
                if isinstance(command, click.Group) and sub not in command.commands:
                    sub_module, _, sub_attr = target.partition(":")
                    command.add_command(getattr(importlib.import_module(sub_module), sub_attr), sub)
            for param in command.params:
                if param.name in REF_OPTIONS and param.callback is None:
                    param.callback = REF_OPTIONS[param.name]
            return command
        return super().get_command(ctx, name)


def parse_shape_option(text: str | None) -> dict[str, int]:
    """`M=4096,K=1024` -> {"M": 4096, "K": 1024}; AxonError on anything else."""
    from axon.errors import SpecError

    if not text:
        return {}
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
            raise SpecError(f"malformed --shape {text!r}: expected NAME=POSITIVE_INT[,NAME=...], e.g. M=4096,K=1024")
        out[name.strip()] = int(value)
    return out


@click.group(cls=AxonGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="axon")
def cli() -> None:
    """Axon: a verified superoptimizer and autotuner for NKI kernels on AWS Trainium."""


@cli.command()
def workloads() -> None:
    """List the built-in workloads: kind, default shape, FLOPs, minimum HBM bytes."""
    from axon.ir import flops, min_bytes
    from axon.workloads import all_workloads

    rows = []
    for w in all_workloads():
        g = w.graph("default")
        shape = ",".join(f"{k}={v}" for k, v in w.presets["default"].items())
        rows.append((w.name, w.kind, shape, f"{flops(g) / 1e9:.2f}", f"{min_bytes(g) / 2**20:.1f}"))
    header = ("workload", "kind", "default shape", "GFLOP", "min MiB")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        click.echo("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def _graph(workload: str, shape: str | None, preset: str, dtype: str) -> Any:
    from axon.workloads import get

    w = get(workload)
    dims = parse_shape_option(shape)
    if w.presets:
        return w.graph(preset, dtype=dtype, **dims)
    return w.graph(None, dtype=dtype, **dims)


_shape_opt = click.option("--shape", default=None, help="Bind dimensions, e.g. M=4096,K=1024 (over the preset).")
_preset_opt = click.option("--preset", default="default", show_default=True, help="Shape preset.")
_dtype_opt = click.option(
    "--dtype", default="float32", show_default=True, type=click.Choice(["float32", "bfloat16", "float16"])
)


@cli.command()
@click.argument("workload")
@_shape_opt
@_preset_opt
@_dtype_opt
def show(workload: str, shape: str | None, preset: str, dtype: str) -> None:
    """Print the traced graph of WORKLOAD (a built-in name or path.py:function)."""
    from axon.ir import flops, min_bytes

    g = _graph(workload, shape, preset, dtype)
    click.echo(g.format())
    click.echo(f"# hash {g.canonical_hash()}  flops {flops(g):,}  min_bytes {min_bytes(g):,}")


@cli.command()
@click.argument("workload")
@_shape_opt
@click.option("--preset", default="small", show_default=True, help="Shape preset.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--force", is_flag=True, help="Evaluate even when it needs more than half of this machine's memory.")
def check(workload: str, shape: str | None, preset: str, seed: int, force: bool) -> None:
    """Evaluate WORKLOAD's graph on random inputs (float64) and report output statistics."""
    import numpy as np

    from axon.ir import evaluate, random_inputs
    from axon.search.guards import check_evaluate

    g = _graph(workload, shape, preset, "float32")
    if not force:
        check_evaluate(g, workload)
    outputs = evaluate(g, random_inputs(g, seed))
    for name, value in outputs.items():
        finite = bool(np.all(np.isfinite(value)))
        click.echo(
            f"{g.name}.{name}: shape {list(value.shape)}  mean {value.mean():+.6g}  std {value.std():.6g}  "
            f"finite {'yes' if finite else 'NO'}"
        )
        if not finite:
            raise click.exceptions.Exit(1)


@cli.command("hw")
@click.argument("name_or_path", default="trn1")
def hw_command(name_or_path: str) -> None:
    """Load and validate a hardware file (a built-in name or a YAML path) and print its numbers."""
    import dataclasses

    from axon.target import load_hw

    hw = load_hw(name_or_path)
    click.echo(f"{hw.name} (NeuronCore-v{hw.generation})  file {hw.source}  sha256 {hw.file_hash}")
    for section in ("engines", "tensor_engine", "memory", "dma", "costs", "ports"):
        value = getattr(hw, section)
        items = dataclasses.asdict(value)
        flat = ", ".join(
            f"{k}={v}" if not isinstance(v, dict) else f"{k}=({', '.join(f'{a}={b}' for a, b in v.items())})"
            for k, v in items.items()
        )
        click.echo(f"  {section}: {flat}")


def main(argv: list[str] | None = None) -> None:
    import logging

    for noisy in ("mlflow", "alembic"):  # schema-migration chatter is not for the terminal
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cli.main(args=argv, prog_name="axon", standalone_mode=False)
    except AxonError as exc:
        click.echo(f"axon: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:  # a bad option or argument: one line, with the command it was for
        command = exc.ctx.command_path if exc.ctx is not None else "axon"
        click.echo(f"axon: error: {command}: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except click.Abort:
        click.echo("axon: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("axon: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
