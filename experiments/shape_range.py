"""A kernel family over a range of shapes against tuning each shape on its own.

For rmsnorm_matmul over M = 256..8192 (step 128) and attention over S = 512..8192 (step 128), trn1,
float32, the sim backend: `axon.search.family` builds the family (its measurements counted); 12
shapes of each range, spread in log size and held out from the family's measuring, are each tuned
on their own for 64 trials (a fresh record database per shape, the cost-model sampler). At each
held-out shape the family's kernel is measured (evaluation, not counted) and divided by the
per-shape tune's best. The measurement fraction is the family's measurements over the per-shape
tunes' measurements of those 12 shapes.

Every step is kept under experiments/results/work/shape_range/ as it finishes (per-shape tunes one
file each), so an interrupted run resumes: `--only pershape` runs just the per-shape tunes (several
processes may share them with `--workloads`).

Last line: family_median_ratio=.. family_max_ratio=.. measurement_fraction=.. schedules_kept=..
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from axon.measure.backend import SimBackend  # noqa: E402
from axon.measure.records import RecordDB  # noqa: E402
from axon.search.api import verified_variants  # noqa: E402
from axon.search.costmodel import CostModel  # noqa: E402
from axon.search.family import Family, FamilyBuilder, FamilyConfig, FamilyProblems, ShapeRow, grid  # noqa: E402
from axon.search.familyout import boundary_checks, family_record, latency_plot  # noqa: E402
from axon.search.tuner import TuneConfig, Tuner  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import get  # noqa: E402

RESULTS = Path(__file__).parent / "results"
WORK = RESULTS / "work" / "shape_range"
RANGES = {"rmsnorm_matmul": {"M": tuple(range(256, 8193, 128))}, "attention": {"S": tuple(range(512, 8193, 128))}}
HELD_OUT = 12
PER_SHAPE_TRIALS = 64


def held_out(shapes: list[dict[str, int]], n: int = HELD_OUT) -> list[dict[str, int]]:
    """`n` interior shapes spread evenly in log size, none at the range's ends or its geometric middle
    (where the family's anchors are)."""
    sizes = np.log([float(np.prod(list(s.values()))) for s in shapes])
    middle = int(np.argmin(np.abs(sizes - (sizes[0] + sizes[-1]) / 2)))
    taken = {0, len(shapes) - 1, middle}
    out: list[int] = []
    for t in np.linspace(sizes[0], sizes[-1], n + 2)[1:-1]:
        order = np.argsort(np.abs(sizes - t))
        out.append(next(int(i) for i in order if int(i) not in taken and int(i) not in out))
    return [shapes[i] for i in sorted(out)]


def kept(path: Path, run):
    """The JSON stored at `path`, or run it and store it whole (a kill leaves no half file)."""
    if path.exists():
        return json.loads(path.read_text())
    value = run()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)
    return value


def problems_for(name: str, hw) -> FamilyProblems:
    graph = get(name).graph("default")
    return FamilyProblems(name, graph, hw, verified_variants(graph), "float32")


def per_shape(problems: FamilyProblems, dims: dict[str, int], backend, seed: int = 0) -> dict:
    problem = problems(dims)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = RecordDB(Path(tmp) / "records.db")
        config = TuneConfig(trials=PER_SHAPE_TRIALS, sampler="costmodel", seed=seed)
        result = Tuner(problem, backend, db, config, None, CostModel(seed=seed)).run()
    best = result.best
    return {
        "dims": dims,
        "best_ns": best.latency_ns if best else None,
        "point": dict(best.point) if best else {},
        "measured": result.measured,
        "seconds": time.perf_counter() - start,
    }


def run_per_shape(name: str, hw, backend) -> list[dict]:
    problems = problems_for(name, hw)
    rows = []
    for dims in held_out(grid(RANGES[name])):
        key = "_".join(f"{k}{v}" for k, v in dims.items())
        rows.append(kept(WORK / f"{name}_{key}_pershape.json", lambda d=dims: per_shape(problems, d, backend)))
        print(f"{name} {dims}: per-shape best {rows[-1]['best_ns']:.0f} ns", file=sys.stderr, flush=True)
    return rows


FAMILY_CONFIG = FamilyConfig(anchor_trials=28, probe_trials=6, anchors=3, probes=3, candidates_per_shape=3)


def run_family(name: str, hw, backend) -> dict:
    """The family over the whole range with the held-out shapes never measured, its kernel measured
    at each held-out shape afterwards, and its boundary numerics checks."""
    problems = problems_for(name, hw)
    shapes = grid(RANGES[name])
    holdout = held_out(shapes)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = RecordDB(Path(tmp) / "records.db")
        family = FamilyBuilder(problems, shapes, backend, db, FAMILY_CONFIG, holdout=holdout).build()
    seconds = time.perf_counter() - start
    family.ranges = dict(RANGES[name])
    evaluation = []
    for dims in holdout:
        row = next(r for r in family.rows if r.dims == dims)
        assert not row.measured, dims
        cand = problems(dims).build(family.schedules[row.schedule])
        m = backend.measure(cand.source, cand.kernel, cand.inputs, hw)
        evaluation.append(
            {"dims": dims, "schedule": row.schedule, "family_ns": m.latency_ns, "predicted_ns": row.latency_ns}
        )
    with tempfile.TemporaryDirectory() as tmp:
        checks = boundary_checks(family, problems, tmp)
    record = family_record(family, checks)
    record.update({"evaluation": evaluation, "seconds": seconds, "held_out": holdout})
    return record


def summarize(records: dict[str, dict], per: dict[str, list[dict]]) -> tuple[str, str]:
    lines = ["# Kernel families over a range of shapes against per-shape tuning", ""]
    lines.append(
        "trn1, float32, sim backend. Each family is built over its whole range (step 128) with 12 shapes held"
        " out (never measured by it); at each held-out shape its kernel is measured and divided by the best of"
        f" a {PER_SHAPE_TRIALS}-trial per-shape tune (cost-model sampler, fresh records). Produced by"
        " `experiments/shape_range.py`."
    )
    ratios_all, fam_meas, per_meas, kept_total = [], 0, 0, 0
    for name, rec in records.items():
        rows = {json.dumps(p["dims"], sort_keys=True): p for p in per[name]}
        lines += ["", f"## {name} ({rec['measurements']} family measurements, {len(rec['schedules'])} schedules)", ""]
        done = [e for e in rec["evaluation"] if json.dumps(e["dims"], sort_keys=True) in rows]
        if len(done) < len(rec["evaluation"]):
            lines += [
                f"**Partial:** {len(done)} of {len(rec['evaluation'])} held-out shapes have their per-shape tune;"
                " the rest are still to run (the experiment resumes from experiments/results/work/).",
                "",
            ]
        lines += [
            "| shape | schedule | family (us) | predicted (us) | per-shape best (us) | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for e in done:
            p = rows[json.dumps(e["dims"], sort_keys=True)]
            ratio = e["family_ns"] / p["best_ns"]
            ratios_all.append(ratio)
            dims = ",".join(f"{k}={v}" for k, v in e["dims"].items() if k in RANGES[name])
            lines.append(
                f"| {dims} | {e['schedule']} | {e['family_ns'] / 1e3:,.1f} | {e['predicted_ns'] / 1e3:,.1f} | "
                f"{p['best_ns'] / 1e3:,.1f} | {ratio:.3f} |"
            )
        mine = [e["family_ns"] / rows[json.dumps(e["dims"], sort_keys=True)]["best_ns"] for e in done]
        if mine:
            lines += [
                "",
                f"{name}: median ratio {statistics.median(mine):.3f}, worst {max(mine):.3f} over {len(mine)} shapes.",
            ]
        lines += [
            "",
            "Numerics at each schedule's boundary shapes (random; adversarial). Above the checks' size limits"
            " (4e9 flops random, 1e8 adversarial) the emulator runs the same schedule at a reduced shape (each"
            " dimension over a cap cut to the cap plus its remainder modulo the cap, or else to the cap, for the first"
            " cap of 512, 1024, 2048 at which it lowers; S=6912 runs at 768, keeping its narrow last key chunk),"
            " as `axon tune` does:",
            "",
        ]
        for c in rec["checks"]:
            ok = c["max_rel_err"] <= c["tolerance"] and c["adversarial_ok"]
            lines.append(
                f"- schedule {c['schedule']} at {c['dims']} (run at {c['checked_dims']}): max rel err"
                f" {c['max_rel_err']:.1e} (tol {c['tolerance']:.0e}); adversarial {c['adversarial']}:"
                f" {'ok' if ok else 'FAILED'}"
            )
        lines += ["", f"![{name}](shape_range_{name}.png)"]
        fam_meas += rec["measurements"]
        # the per-shape cost of all 12 held-out shapes: measured where run, else the mean of those run
        runs = [p["measured"] for p in per[name]] or [PER_SHAPE_TRIALS]
        per_meas += round(sum(runs) + (HELD_OUT - len(runs)) * statistics.mean(runs))
        kept_total += len(rec["schedules"])
    fraction = fam_meas / max(per_meas, 1)
    if not ratios_all:
        ratios_all = [float("nan")]
    last = (
        f"family_median_ratio={statistics.median(ratios_all):.3f} family_max_ratio={max(ratios_all):.3f} "
        f"measurement_fraction={fraction:.3f} schedules_kept={kept_total}"
    )
    lines += ["", f"Family measurements {fam_meas} against {per_meas} for the per-shape tunes.", "", "    " + last, ""]
    return "\n".join(lines), last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", nargs="*", default=list(RANGES))
    parser.add_argument("--only", choices=("pershape", "family", "all", "summary"), default="all")
    args = parser.parse_args()
    hw, backend = load_hw("trn1"), SimBackend()
    per, records = {}, {}
    for name in args.workloads:
        if args.only == "summary":  # what is on disk now, nothing run: partial figures, said so
            if (WORK / f"{name}_family.json").exists():
                records[name] = json.loads((WORK / f"{name}_family.json").read_text())
                per[name] = [json.loads(p.read_text()) for p in sorted(WORK.glob(f"{name}_*_pershape.json"))]
            continue
        if args.only in ("family", "all"):
            records[name] = kept(WORK / f"{name}_family.json", lambda n=name: run_family(n, hw, backend))
        if args.only in ("pershape", "all"):
            per[name] = run_per_shape(name, hw, backend)
    if args.only not in ("all", "summary"):
        return
    for name, rec in records.items():
        if not per[name]:
            continue
        family = family_from_record(rec)
        per_shape = {json.dumps(p["dims"]): p["best_ns"] for p in per[name]}
        latency_plot(family, RESULTS / f"shape_range_{name}.png", per_shape)
    text, last = summarize(records, per)
    (RESULTS / "shape_range.md").write_text(text)
    print(last)


def family_from_record(rec: dict) -> Family:
    rows = [
        ShapeRow(
            r["dims"],
            r["schedule"],
            r["latency_ns"] or float("nan"),
            r["measured"],
            r["tuned_best_ns"],
            r["roofline_ns"],
        )
        for r in rec["rows"]
    ]
    return Family(rec["workload"], {}, rec["schedules"], rows, rec["measurements"], rec["measured_shapes"])


if __name__ == "__main__":
    main()
