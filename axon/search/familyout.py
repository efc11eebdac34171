"""What a kernel family leaves behind: one kernel file per served shape, the dispatching module,
the numerics checks at each group's boundary shapes, and the MLflow run with its latency plot.

Kernels: NKI sizes are compile-time constants, so the family emits one kernel per served shape,
each generated from its group's schedule (not a shape-parametric kernel). Partial tiles (a size
that is not a multiple of the tile) are handled by the lowering itself: the last tile is peeled at
its true size (bounded slices; no padding, no masks), so a kernel reads and writes exactly its shape.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from axon.errors import AxonError
from axon.lazy import matplotlib
from axon.lower.emit import HEADER, with_shape_guard
from axon.options import format_sizes
from axon.search.checks import adversarial_check, numerics_check
from axon.search.family import Family, FamilyProblems, size, span
from axon.search.provenance import delivered
from axon.track import Tracker


@dataclass(frozen=True)
class BoundaryCheck:
    schedule: int
    dims: dict[str, int]  # the served shape
    checked_dims: dict[str, int]  # the shape the emulator ran (reduced above the checks' size limits)
    max_rel_err: float
    tolerance: float
    adversarial_ok: bool
    adversarial: str

    @property
    def ok(self) -> bool:
        return self.max_rel_err <= self.tolerance and self.adversarial_ok


def boundary_checks(family: Family, problems: FamilyProblems, kernel_dir: str | Path) -> list[BoundaryCheck]:
    """Each schedule executed in the emulator against the float64 reference, random and adversarial
    inputs, at the smallest and largest shape it serves."""
    out = []
    for i, point in enumerate(family.schedules):
        shapes = sorted(family.shapes_of(i), key=size)
        for dims in {json.dumps(d): d for d in (shapes[0], shapes[-1])}.values():
            problem = problems(dims)
            num = numerics_check(problem, point, directory=kernel_dir)
            adv = adversarial_check(problem, point, kernel_dir)
            out.append(
                BoundaryCheck(i, dims, num.dims, num.max_rel_err, num.tolerance, adv.ok, adv.failure() or adv.summary())
            )
    return out


def _served(shapes: list[dict[str, int]]) -> str:
    """The sizes served of each dimension the family varies: "M=1..1000" of M=1,100,129,300,1000 named
    shapes (M=500) the family does not serve, in the very message that refused them."""
    varying = [k for k in sorted(shapes[0]) if len({s[k] for s in shapes}) > 1] or sorted(shapes[0])
    return ",".join(f"{k}={format_sizes(sorted({s[k] for s in shapes}))}" for k in varying)


def _tag(dims: dict[str, int]) -> str:
    return "_".join(f"{k}{v}" for k, v in dims.items())


def write_module(
    family: Family,
    problems: FamilyProblems,
    out: Path,
    checks: list[BoundaryCheck],
    hw: str,
    run_id: str = "",
    request: Any = None,
) -> Path:
    """Write OUT/<workload>_family.py and OUT/kernels/; return the module's path. With the tune's
    `request`, each kernel file ends with the block `axon verify FILE` checks it again from."""
    kernels = out / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    graph = problems.graph
    inputs = [tuple(str(d.name) if hasattr(d, "name") else str(d) for d in n.type.shape) for n in graph.inputs]
    table, shapes = {}, {}
    kernel_name = ""
    for row in family.rows:
        cand = problems(row.dims).build(family.schedules[row.schedule])
        kernel_name = cand.kernel
        path = kernels / f"{cand.kernel}_{_tag(row.dims)}.py"
        if request is None:
            path.write_text(with_shape_guard(cand.source, cand.kernel, cand.inputs))
        else:
            point = family.schedules[row.schedule]
            path.write_text(delivered(cand, problems(row.dims), point, request, dict(graph.bindings)))
        key = tuple(row.dims[k] for k in sorted(row.dims))
        table[key] = (f"kernels/{path.name}", cand.kernel, row.schedule)
        bound = problems(row.dims).graph  # each input's concrete shape: a dimension may be "KV*G" or "D/2"
        shapes[key] = tuple(bound.concrete_shape(n.id) for n in bound.inputs)
    measured = [r for r in family.rows if r.measured]
    lines = [
        f"Kernel family: {family.workload} over {span([r.dims for r in family.rows])} on {hw} "
        f"({problems.dtype}), {len(family.rows)} shapes, {len(family.schedules)} schedules.",
        "",
        "One NKI kernel per served shape (NKI sizes are compile-time constants), each generated from",
        "its group's schedule; not a shape-parametric kernel. Partial tiles: the lowering peels the",
        "last tile at its true size (bounded slices), no padding and no masks. A shape outside the",
        "table raises KeyError (no kernel was generated or checked for it).",
        "",
        f"Measured ({family.measurements} measurements on the simulator"
        + (f", and {family.resumed} trials of an earlier run resumed" if family.resumed else "")
        + f") at {len(measured)} shapes: "
        + ", ".join(_tag(r.dims) for r in measured)
        + ". Every other shape's schedule and latency are predicted (schedule: the cost model; latency: "
        "the schedule's measured fraction of the roofline, interpolated in log size).",
        "",
    ]
    for i, point in enumerate(family.schedules):
        served = span(family.shapes_of(i), [r.dims for r in family.rows])
        lines.append(f"schedule {i}: {served}: {json.dumps(point, sort_keys=True)}")
    lines.append("")
    lines.append("Numerics at each schedule's boundary shapes (emulator vs float64 reference):")
    for c in checks:
        lines.append(
            f"  schedule {c.schedule} at {_tag(c.dims)} (run at {_tag(c.checked_dims)}): max rel err "
            f"{c.max_rel_err:.1e} (tol {c.tolerance:.0e}); adversarial {'ok' if c.adversarial_ok else 'FAILED'}"
        )
    if run_id:
        lines.append(f"MLflow run: {run_id}")
    rows = [
        {
            "dims": r.dims,
            "schedule": r.schedule,
            "latency_ns": r.latency_ns,
            "measured": r.measured,
            "roofline_ns": r.roofline_ns,
        }
        for r in family.rows
    ]
    body = _MODULE.format(
        doc="\n".join(lines).replace('"""', "'''"),
        dims=tuple(sorted(family.rows[0].dims)),
        inputs=inputs,
        names=tuple(graph.input_names),
        shapes=shapes,
        table=table,
        rows=rows,
        served=_served([r.dims for r in family.rows]),
        kernel=kernel_name,
        hw=hw,
        dtype=problems.dtype,
    )
    module = out / f"{kernel_name}_family.py"  # the kernels' name: a spec's workload is "dir/f.py:fn"
    module.write_text(body)
    _drop_stale(kernels, kernel_name, {entry[0].split("/")[-1] for entry in table.values()})
    return module


def _drop_stale(kernels: Path, kernel: str, current: set[str]) -> None:
    """Remove the kernel files an earlier family of the same kernel left in `kernels/` (a rerun over
    another range): the module no longer dispatches to them, and `axon verify kernels/*.py` would
    check kernels it does not serve. Only files the lowering generated for this kernel, under the name a
    family gives the shape they were generated for, go: a user's copy (`..._S129_mine.py`) or a kernel
    `axon tune --out` wrote there under a name of the user's is the user's, and stays."""
    for path in kernels.glob(f"{kernel}_*.py"):
        if path.name in current:
            continue
        text = path.read_text(errors="replace")
        if text.startswith(HEADER) and f"\ndef {kernel}(" in text and _is_family_name(text, kernel, path.name):
            path.unlink()


def _is_family_name(text: str, kernel: str, name: str) -> bool:
    """`name` is the name a family gives the kernel file `text` for the shape its header says it was
    generated at, its dimensions in any order (a family puts the ones it varies last); False when that
    line is not there or does not parse."""
    for line in text.splitlines()[:4]:
        _, sep, shape = line.partition("  shapes: ")
        if sep:
            try:
                tag = _tag(dict(ast.literal_eval(shape)))
            except (ValueError, SyntaxError, TypeError):
                return False
            return name.startswith(f"{kernel}_") and sorted(name[len(kernel) + 1 : -3].split("_")) == sorted(
                tag.split("_")
            )
    return False


_MODULE = '''"""{doc}
"""

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIMS = {dims!r}  # the dimensions the family varies, in the order of KERNELS' keys
INPUTS = {names!r}  # the kernel's array parameters, in order
INPUT_DIMS = {inputs!r}  # each input's dimensions, by position
SHAPES = {shapes!r}  # shape -> each input's array shape
SERVED = {served!r}
DTYPE = {dtype!r}  # every kernel's dtype: it is compiled into the kernels (tiles, output) and checked in it
KERNELS = {table!r}  # shape -> (kernel file, function, schedule)
ROWS = {rows!r}


def shape_of(*arrays):
    """The family's dimensions (a key of KERNELS) for arrays of these shapes; TypeError for another
    number of arrays or arrays not of DTYPE, KeyError for shapes no kernel of the family serves (or
    that disagree)."""
    if len(arrays) != len(INPUTS):
        raise TypeError(f"{kernel}: expected {{len(INPUTS)}} arrays ({{', '.join(INPUTS)}}), got {{len(arrays)}}")
    # the kernels were tuned and checked in DTYPE: other arrays ran cast, their result silently in DTYPE
    wrong = [f"{{n}} is {{getattr(a, 'dtype', type(a).__name__)}}" for n, a in zip(INPUTS, arrays)
             if str(getattr(a, "dtype", "")) != DTYPE]
    if wrong:
        raise TypeError(f"{kernel}: this family's kernels take {{DTYPE}} arrays, but {{', '.join(wrong)}}")
    got = tuple(tuple(int(n) for n in getattr(a, "shape", ())) for a in arrays)
    for key, shapes in SHAPES.items():
        if shapes == got:
            return key
    given = ", ".join(f"{{n}}{{list(s)}}" for n, s in zip(INPUTS, got))
    wanted = ", ".join(f"{{n}}[{{', '.join(d)}}]" for n, d in zip(INPUTS, INPUT_DIMS))
    raise KeyError(f"{kernel}: no kernel in this family for inputs {{given}} (inputs {{wanted}}; served: {{SERVED}})")


def kernel_file(*arrays):
    """(path, function name, schedule) of the kernel for these arrays' shape; KeyError outside the family."""
    path, name, schedule = KERNELS[shape_of(*arrays)]
    return HERE / path, name, schedule


def kernel_for(*arrays):
    """The NKI kernel (its @nki.jit function) for these arrays' shape."""
    path, name, _ = kernel_file(*arrays)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def __call__(*arrays):
    return kernel_for(*arrays)(*arrays)


{kernel} = __call__


def emulate(*arrays, hw={hw!r}):
    """Run the dispatched kernel in Axon's NKI emulator (on the hardware the family was tuned for)."""
    from axon import nki

    path, name, _ = kernel_file(*arrays)
    return nki.run(nki.load_kernel(f"{{path}}:{{name}}"), *arrays, hw=hw)
'''


def load_family(path: str | Path) -> ModuleType:
    """Import a family module written by `axon tune --shape NAME=LO..HI` (its path or its directory)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*_family.py"))
        if not found:
            raise AxonError(f"{path}: no *_family.py module in this directory")
        path = found[0]
    if not path.is_file():
        raise AxonError(f"{path}: no such family module")
    if "\nKERNELS = " not in path.read_text(errors="replace"):  # a spec or kernel file was imported as one
        raise AxonError(f"{path}: not a kernel family module (`axon tune W --shape M=LO..HI` writes one)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise AxonError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def latency_plot(family: Family, path: Path, per_shape: dict[str, float] | None = None) -> Path:
    """Latency over the range: the family (measured and predicted), the per-shape optimum where one
    was measured, the roofline."""
    fig = matplotlib().figure.Figure(figsize=(7, 4))
    ax = fig.subplots()
    rows = sorted(family.rows, key=lambda r: size(r.dims))
    varying = sorted(k for k in rows[0].dims if len({r.dims[k] for r in rows}) > 1) or sorted(rows[0].dims)

    def x(dims: dict[str, int]) -> float:
        return size({k: dims[k] for k in varying if k in dims})

    xs = [x(r.dims) for r in rows]
    ax.plot(xs, [r.latency_ns / 1e3 for r in rows], "-", color="C0", label="family (predicted)")
    meas = [(x(r.dims), r.latency_ns / 1e3) for r in rows if r.measured]
    if meas:
        ax.scatter(*zip(*meas), color="C0", zorder=3, label="family (measured)")
    tuned = [(x(r.dims), r.tuned_best_ns / 1e3) for r in rows if r.tuned_best_ns]
    if per_shape:
        tuned += [(x(json.loads(k)), v / 1e3) for k, v in per_shape.items()]
    if tuned:
        ax.scatter(*zip(*tuned), marker="x", color="C3", zorder=4, label="per-shape optimum (measured)")
    ax.plot(xs, [r.roofline_ns / 1e3 for r in rows], "--", color="gray", label="roofline")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(" x ".join(varying))
    ax.set_ylabel("latency (us)")
    ax.set_title(f"{family.workload}: {len(family.schedules)} schedules over {span([r.dims for r in rows])}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def family_record(family: Family, checks: list[BoundaryCheck]) -> dict[str, Any]:
    return {
        "workload": family.workload,
        "schedules": family.schedules,
        "measurements": family.measurements,
        "resumed": family.resumed,
        "measured_shapes": family.measured_shapes,
        "rows": [
            {
                "dims": r.dims,
                "schedule": r.schedule,
                "latency_ns": None if math.isnan(r.latency_ns) else r.latency_ns,
                "measured": r.measured,
                "tuned_best_ns": r.tuned_best_ns,
                "roofline_ns": r.roofline_ns,
            }
            for r in family.rows
        ],
        "checks": [c.__dict__ for c in checks],
    }


def log_family(tracker: Tracker, family: Family, checks: list[BoundaryCheck], plot: Path, params: dict) -> str:
    """The family as an MLflow run: its record (shapes, schedules, predicted and measured latencies)
    and the latency plot; returns the run id."""
    with tracker.run(f"family {family.workload}", params=params, tags={"axon.kind": "family"}) as run:
        run.log_metrics(
            {
                "schedules": len(family.schedules),
                "shapes": len(family.rows),
                "measurements": family.measurements,
                "measured_shapes": len(family.measured_shapes),
                "numerics_ok": float(all(c.ok for c in checks)),
            }
        )
        run.log_dict(family_record(family, checks), "family/family.json")
        run.log_artifact(plot, "family")
        return run.run_id
