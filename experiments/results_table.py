"""The results table: Axon tuned against unfused-default, unfused-tuned, our hand-written kernels, the
Neuron compiler's kernels, AWS's tutorial kernels and the roofline.

For each of the 20 workloads at its default shape, on trn1 and trn2, with the sim backend:
- unfused-default: every op its own kernel (fusion=unfused) at the space's default point;
- unfused-tuned: the same op-by-op lowering, tuned by Axon with the same budget and seed;
- ours-handwritten: the hand-written kernels of `axon.lower.expert` (where one exists);
- compiler: the compiler-style NKIBench kernel measured on trn1 for that workload and shape (silu,
  adamw, matmul, add_rmsnorm_matmul, bmm_softmax, lora, rope), and nki-samples: AWS's tutorial kernel
  at the same shape and dtype (rmsnorm, layernorm, softmax, matmul, attention; the fastest version
  that runs, named in the cell): both unmodified, checked by the emulator against their float64
  reference and simulated with the same hardware file as Axon (`rivals.py`);
- roofline: max(TensorE time at peak, HBM time of the minimum bytes);
- axon: full search over verified variants x schedule space (cost-model sampler).
On trn1 every tuned cell is the median of `--seeds` seeds (3), with Axon's min-max shown; trn2 runs
`--trn2-seeds` (1). Each seed is its own sweep with its own records database (WORK/tuning/<hw>/seed<k>),
so no seed starts from another's measurements; within a seed the rows share that database in the
table's order (a later row's cost model trains on the records of the rows before it, as a nightly
sweep's does). A second table puts the seven NKIBench tasks side by side with their trn1 measurements
(`measured.json`) and the best kernel another optimizer found (`best_found.json`): Axon's predicted
latency is the measured compiler latency x Axon simulated / compiler simulated. A third table
compares Axon with the tutorial kernels at the tutorials' own shape and dtype (attention S=512, D=128
bf16; matmul K=1024, M=4096, N=2048 bf16), tuned with the same budget and seeds.

Rows are keyed by what the code emits: a seed's row stays while the current code still emits the
kernels it reports (its best and its unfused-tuned kernel, checked by `axon.search.current.CurrentCode`
at the points the row holds), and is tuned again otherwise; a refactor that changes no kernel re-tunes
nothing. A row also holds a hash of what times it (emulator, simulator, backend, hardware file): when that
changes, the row's kernels are simulated again and the row stays only if every latency is the same. The
row and rival-cell files (WORK/rows, WORK/rivals) are kept in git, so the table resumes on a fresh
machine; the records databases are not needed to keep a row. Compiler and nki-samples cells are
cached by their kernel file, the hardware file and the emulator's and simulator's source (`rivals.py`).
An interrupted table resumes where it stopped.

Usage: results_table.py [--only w1,w2] [--hw trn1] [--seeds N] [--trials T] [--out DIR] [--cached-only]
(`--out`: where results_table.md/.png and the work directory go; default experiments/results).

Last line (trn1): geomean_single_vs_default=A geomean_multi_vs_default=B geomean_multi_vs_unfused_tuned=C
max_speedup=D ours_handwritten_min=E rmsnorm_matmul_vs_ours_handwritten=F roofline70=N/20
geomean_vs_compiler=X min_vs_compiler=Y vs_nki_samples_min=Z vs_nki_samples_geomean=G
predicted_vs_best_found_geomean=W beats_best_found=N/7
(vs_nki_samples_* over the main table's trn1 rows and the rows at the tutorials' own shapes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, when imported from elsewhere

import rivals  # noqa: E402
import table_report as report  # noqa: E402
from corpus import DATA, NKIBENCH  # noqa: E402

from axon.errors import AxonError  # noqa: E402
from axon.lower import expert  # noqa: E402
from axon.measure.backend import SimBackend, kernel_hash, timing_version  # noqa: E402
from axon.measure.records import RecordDB  # noqa: E402
from axon.search.api import TuneRequest, expert_latency, tune, verified_variants, workload_graph  # noqa: E402
from axon.search.current import CurrentCode  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.search.sampler import point_key  # noqa: E402
from axon.search.storage import journal_storage  # noqa: E402
from axon.search.tuner import TuneConfig, Tuner  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workdir import Workdir  # noqa: E402
from axon.workloads import Workload, all_workloads, get  # noqa: E402

RESULTS = Path(__file__).parent / "results"


class Original:
    """The graph as written, as the only 'variant' (what an op-by-op compiler lowers)."""

    def __init__(self, graph):
        self.graph, self.hash, self.moves, self.proofs = graph, graph.canonical_hash(), (), ()


class UnfusedProblem(LoweredProblem):
    """The op-by-op space: fusion pinned to `unfused`, every other knob free."""

    def _pin(self, point):
        return {**point, "fusion": self.unfused_point(0)["fusion"]}

    def sample(self, rng):
        return self._pin(super().sample(rng))

    def mutate(self, point, rng):
        return self._pin(super().mutate(point, rng))

    def neighbours(self, point):
        out = {}
        for p in map(self._pin, super().neighbours(point)):
            out.setdefault(point_key(p), p)
        return list(out.values())

    def default_point(self, index=0):
        return self.unfused_point(index)

    def distributions(self):
        d = super().distributions()
        from optuna.distributions import CategoricalDistribution

        d["fusion"] = CategoricalDistribution((self.unfused_point(0)["fusion"],))
        return d


@dataclass(frozen=True)
class Spot:
    """One row to tune: a workload at its default preset with `shape` bound over it, in `dtype`."""

    workload: Workload
    shape: dict[str, int] = field(default_factory=dict)
    dtype: str = "float32"
    label: str = ""  # the row's name (the workload's name at the default shape)
    unfused: bool = True  # also tune the op-by-op space (the main table's unfused-tuned column)

    @property
    def name(self) -> str:
        return self.label or self.workload.name

    def graph(self):
        return workload_graph(self.workload, "default", self.dtype, self.shape)

    def dims(self) -> dict[str, int]:
        return dict(self.graph().bindings)


# the tutorials' own shape and dtype, where the main table's default shape does not fit them
OWN_SHAPES = (
    ("attention", {"H": 1, "S": 512, "D": 128}, "bfloat16"),
    ("matmul", {"M": 4096, "K": 1024, "N": 2048}, "bfloat16"),
)


def own_spot(workload: str, shape: dict[str, int], dtype: str) -> Spot:
    dims = " ".join(f"{k}={v}" for k, v in shape.items())
    return Spot(get(workload), dict(shape), dtype, f"{workload} {dims} {dtype}", unfused=False)


def problems(spot: Spot, hw_name: str) -> list[LoweredProblem]:
    """The row's search problems: the full space, and (main rows) the op-by-op space (label unfused_tuned)."""
    hw = load_hw(hw_name)
    graph = spot.graph()
    name = spot.workload.name
    full = LoweredProblem(name, graph, hw, verified_variants(graph), spot.dtype)
    if not spot.unfused:
        return [full]
    return [full, UnfusedProblem(name, graph, hw, [Original(graph)], spot.dtype, label="unfused_tuned")]


def row_current(row: dict, spot: Spot, hw_name: str, db: RecordDB) -> bool:
    """A row is current when the current code still emits the kernels it reports (its best kernel
    and its unfused-tuned kernel, at the points the row holds; a row from before points were kept
    finds them by hash in its seed's records): the one currency check of `axon.search.current`,
    so a refactor that emits the same kernels keeps every row."""
    kernels = row.get("kernels")
    if not kernels:
        return False
    points = row.setdefault("points", {})
    for problem in problems(spot, hw_name):
        which = "unfused_tuned" if problem.label else "axon"
        if which not in points:
            record = next((r for r in db.records(task=problem.task) if r.kernel_hash == kernels.get(which)), None)
            if record is None:
                return False
            points[which] = dict(record.point)
        try:
            if problem.build(dict(points[which])).kernel_hash != kernels.get(which):
                return False
        except AxonError:
            return False
    return True


def timing_key(hw_name: str) -> str:
    """What decides a simulated latency: the emulator, the simulator, the backend and the hardware file."""
    return rivals.source_hash((), timing_version(), load_hw(hw_name).file_hash)


def row_times_the_same(row: dict, spot: Spot, hw_name: str) -> bool:
    """Whether the current simulator gives the row's kernels (best, unfused-tuned, unfused-default)
    exactly the latencies the row holds: after a change of the simulator's code that changes no
    timing (a refactor, a faster trace) the row stays; after one that does, it is tuned again,
    since another kernel may now be the best."""
    full, *rest = problems(spot, hw_name)
    points = row.get("points", {})
    kernels = [
        (full, points.get("axon"), row.get("axon_ns")),
        (full, full.unfused_point(0), row.get("unfused_default_ns")),
    ]
    if rest:
        kernels.append((rest[0], points.get("unfused_tuned"), row.get("unfused_tuned_ns")))
    backend = SimBackend()
    for problem, point, ns in kernels:
        if point is None or ns is None:
            return False
        cand = problem.build(dict(point))
        if backend.measure(cand.source, cand.kernel, cand.inputs, problem.hw).latency_ns != ns:
            return False
    return True


def seed_row(spot: Spot, hw_name: str, trials: int, seed: int, work: Path, cached_only: bool = False) -> dict:
    """One seed's row: cached under WORK/rows by row, hardware, budget and seed, tuned in that seed's
    own records database (WORK/tuning/<hw>/seed<k>; rows at the tutorials' shapes in WORK/tuning-own)."""
    w = spot.workload
    key = spot.name.replace(" ", "_").replace("=", "")
    cache = work / "rows" / f"{key}_{hw_name}_{trials}_{seed}.json"
    tuning = work / ("tuning" if spot.unfused else "tuning-own") / hw_name / f"seed{seed}"
    row = json.loads(cache.read_text()) if cache.exists() else None
    if row is not None and not row_current(row, spot, hw_name, RecordDB(tuning / "records.db")):
        if not cached_only:
            row = None  # the code emits other kernels than this row reports: tune it again
        else:
            row["stale"] = True  # kept, and marked as such in the table
    if row is not None and not row.get("stale") and row.get("timing") != timing_key(hw_name):
        if row_times_the_same(row, spot, hw_name):
            row["timing"] = timing_key(hw_name)
            _store(cache, row)
        elif not cached_only:
            row = None  # the simulator times these kernels otherwise now: tune it again
        else:
            row["stale"] = True
    if row is not None:
        if row.get("expert_hash") != _expert_hash(w.name):  # the hand-written kernel changed: re-measure it alone
            row["expert_ns"] = expert_latency(w.name, spot.graph(), load_hw(hw_name), SimBackend())
            row["expert_hash"] = _expert_hash(w.name)
            _store(cache, row)
        return row
    if cached_only:
        raise LookupError("not measured yet (--cached-only)")
    start = time.perf_counter()
    study, attempt = fresh_study(tuning, f"table:{spot.name}:{hw_name}:{seed}")
    request = TuneRequest.make(
        w.name,
        hw=hw_name,
        trials=trials,
        seed=seed,
        workdir=tuning,
        track=False,
        shape=spot.shape,
        dtype=spot.dtype,
        study=study,
    )
    tuned = tune(request)
    tuning_s = time.perf_counter() - start
    full, *rest = problems(spot, hw_name)
    db = RecordDB(tuning / "records.db")
    unfused_best = None
    if rest:
        config = TuneConfig(
            trials=trials, sampler="costmodel", seed=seed, study_name=f"table-unfused:{w.name}:{hw_name}:{seed}"
        )
        unfused_best = Tuner(rest[0], SimBackend(), db, config, storage=None).run().best
    best = CurrentCode(full, timing_version()).best(db.records(task=full.task))
    row = {
        "workload": w.name,
        "label": spot.name,
        "dtype": spot.dtype,
        "kind": w.kind,
        "hw": hw_name,
        "seed": seed,
        "attempt": attempt,
        "axon_ns": tuned.best_latency_ns,
        "unfused_default_ns": tuned.unfused_ns,
        "unfused_tuned_ns": unfused_best.latency_ns if unfused_best else None,
        "expert_ns": tuned.expert_ns,
        "roofline_ns": tuned.roofline_ns,
        "moves": list(tuned.moves),
        "point": tuned.best_description,
        "tuning_s": tuning_s,
        "trials": trials,
        "numerics_ok": tuned.numerics.ok if tuned.numerics else None,
        "expert_hash": _expert_hash(w.name),
        "kernels": {
            "axon": best.kernel_hash if best else None,
            **({"unfused_tuned": unfused_best.kernel_hash if unfused_best else None} if rest else {}),
        },
        "points": {
            **({"axon": dict(best.point)} if best else {}),
            **({"unfused_tuned": dict(unfused_best.point)} if unfused_best else {}),
        },
        "timing": timing_key(hw_name),
    }
    _store(cache, row)
    return row


def fresh_study(tuning: Path, name: str) -> tuple[str, int]:
    """A study name no earlier tuning of this row used, and its attempt number: a row tuned again (its
    kernels no longer current, or its row file lost) must not resume the old study, which holds the
    whole budget of trials of the old code and would run none."""
    journal = tuning / "optuna.log"
    if not journal.exists():
        return name, 0
    taken = {s.study_name for s in journal_storage(Workdir(tuning), None).get_all_studies()}
    attempt = 0
    while (f"{name}:{attempt}" if attempt else name) in taken:
        attempt += 1
    return (f"{name}:{attempt}" if attempt else name), attempt


def _expert_hash(workload: str) -> str | None:
    return kernel_hash(expert.source(workload)) if workload in expert.KERNELS else None


def _store(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)


def rival_cells(spot: Spot, hw_name: str, data: Path, work: Path, cached_only: bool) -> dict[str, Any]:
    """The row's compiler and nki-samples cells (cached by `rivals.measure`), with the NKIBench task."""
    dims = spot.dims()
    out: dict[str, Any] = {}
    compiler = rivals.compiler_rival(spot.workload.name, dims, spot.dtype, data)
    if compiler is not None:
        out["compiler_task"] = rivals.COMPILER_TASKS[spot.workload.name][0]
    for key, rival in (
        ("compiler", compiler),
        ("nki_samples", rivals.samples_rival(spot.workload.name, dims, spot.dtype)),
    ):
        if rival is None:
            continue
        cell = rivals.measure(rival, hw_name, data, work, compute=not cached_only)
        if cell is not None:
            cell["label"] = report.version_label(cell["version"])
            out[key] = cell
    return out


def table_row(spot: Spot, hw_name: str, seeds: range, args: argparse.Namespace, work: Path) -> dict:
    """The row: its seeds combined (`table_report.combine_seeds`) and its compiler and nki-samples cells."""
    per_seed = []
    for seed in seeds:
        try:
            per_seed.append(seed_row(spot, hw_name, args.trials, seed, work, args.cached_only))
        except Exception as exc:  # one failing seed or workload must not hide the rest of the table
            per_seed.append(
                {
                    "workload": spot.workload.name,
                    "label": spot.name,
                    "dtype": spot.dtype,
                    "kind": spot.workload.kind,
                    "hw": hw_name,
                    "seed": seed,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            )
    row = report.combine_seeds(per_seed)
    start = time.perf_counter()
    try:
        row.update(rival_cells(spot, hw_name, Path(args.data), work, args.cached_only))
    except Exception as exc:  # a missing corpus file is reported on the row, not lost
        row["rival_error"] = f"{type(exc).__name__}: {exc}"
    row["rival_s"] = time.perf_counter() - start
    return row


def describe(r: dict) -> str:
    if not r.get("axon_ns"):
        return r.get("error", "")[:200]
    parts = [f"axon {r['axon_ns'] / 1e3:,.1f} us ({report.seeds_cell(r)})"]
    for key in ("compiler", "nki_samples"):
        cell = r.get(key)
        if cell:
            parts.append(f"{key} {report.us(cell['ns']) or '-'} us {cell.get('label', '')}")
    if r.get("rival_error"):
        parts.append(r["rival_error"][:200])
    return (
        "; ".join(parts) + f" (tuning {r.get('tuning_s') or 0:.0f} s, compiler/nki-samples cells {r['rival_s']:.1f} s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per trn1 row (seed, seed+1, ...)")
    ap.add_argument("--trn2-seeds", type=int, default=1, help="seeds per trn2 row")
    ap.add_argument("--hw", default="trn1,trn2")
    ap.add_argument("--only", "--workloads", dest="only", default="", help="comma-separated workloads")
    ap.add_argument("--no-own-shapes", action="store_true", help="skip the rows at the tutorials' own shapes")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (table, plot and work directory)")
    ap.add_argument("--data", default=str(DATA), help="folder holding the NKI corpora")
    ap.add_argument("--cached-only", action="store_true", help="write the table from the rows already measured")
    ap.add_argument("--jobs", type=int, default=1, help="seeds tuned at once, each in its own process")
    args = ap.parse_args()
    if args.jobs < 1:
        _bad_input(f"--jobs {args.jobs}: at least 1")
    started, wall_start = time.perf_counter(), time.time()
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - {w.name for w in all_workloads()})
    if unknown:
        _bad_input(f"--only: unknown workloads: {', '.join(unknown)}")
    chosen = [w for w in all_workloads() if not only or w.name in only]
    hws = args.hw.split(",")
    rows, own = [], []
    if args.jobs > 1 and not args.cached_only:
        tune_seeds_in_parallel(chosen, hws, args, work)
    for hw_name in hws:
        for spot in table_spots(chosen, hw_name, args):
            row = table_row(spot, hw_name, seed_range(hw_name, args), args, work)
            (rows if spot.unfused else own).append(row)
            print(f"{hw_name} {spot.name}: {describe(row)}", flush=True)
    data = Path(args.data) / NKIBENCH
    measured = json.loads((data / "measured.json").read_text())
    best_found = json.loads((data / "best_found.json").read_text())
    bench = report.nkibench_rows(rows, measured, best_found)
    write_table(rows, own, bench, hws, args, out)
    fresh = sum(1 for r in rows + own if r.get("axon_ns") and not r.get("stale"))
    print(f"rows whose kernels the current code still emits: {fresh}/{len(rows) + len(own)}")
    stored = sum(1 for p in (work / "rows").glob("*.json") if p.stat().st_mtime >= wall_start)
    minutes = (time.perf_counter() - started) / 60
    print(f"wall time {minutes:.1f} min ({stored} seed rows tuned or re-timed in this run, --jobs {args.jobs})")
    trn1 = [r for r in rows if r["hw"] == "trn1"]
    n_tasks = sum(1 for w in chosen if w.name in rivals.COMPILER_TASKS)
    print(report.last_line(trn1, own, bench, len(chosen), n_tasks))


def _bad_input(message: str) -> NoReturn:
    """A user's mistake: one line, exit 2."""
    print(f"results_table.py: {message}", file=sys.stderr)
    sys.exit(2)


def seed_range(hw_name: str, args: argparse.Namespace) -> range:
    return range(args.seed, args.seed + (args.seeds if hw_name == "trn1" else args.trn2_seeds))


def table_spots(chosen: list[Workload], hw_name: str, args: argparse.Namespace) -> list[Spot]:
    """The rows of one hardware's table, in the table's order (the main rows, then the tutorials' shapes)."""
    spots = [Spot(w) for w in chosen]
    if hw_name == "trn1" and not args.no_own_shapes:
        names = {w.name for w in chosen}
        spots += [own_spot(name, shape, dtype) for name, shape, dtype in OWN_SHAPES if name in names]
    return spots


def tune_seeds_in_parallel(chosen: list[Workload], hws: list[str], args: argparse.Namespace, work: Path) -> None:
    """`--jobs N`: each (hardware, seed) tuned in its own process, N at once, its rows in the table's
    order (a seed's rows share its records database, so they stay in one process), and the compiler
    and nki-samples cells as one more task; the table is then assembled from what they stored."""
    tasks: list[tuple[list[str], int | None]] = [(hws, None)]
    tasks += [([hw_name], seed) for hw_name in hws for seed in seed_range(hw_name, args)]
    names = [w.name for w in chosen]
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        done = [pool.submit(_table_task, task_hws, seed, names, args, work) for task_hws, seed in tasks]
        for (task_hws, seed), future in zip(tasks, done):
            label = "compiler and nki-samples cells" if seed is None else f"{task_hws[0]} seed {seed}"
            print(f"{label}: {future.result()}", flush=True)


def _table_task(hws: list[str], seed: int | None, names: list[str], args: argparse.Namespace, work: Path) -> str:
    """One `--jobs` task, in a worker process: seed `seed`'s rows, or (seed None) every row's compiler
    and nki-samples cells, stored for the assembling pass; a row that fails is left to that pass,
    which records its error on the row."""
    start = time.perf_counter()
    os.environ["AXON_CPUS"] = "1"  # --jobs processes share the CPUs: a tune in one of them forks no helper
    failed = []
    for hw_name in hws:
        for spot in table_spots([get(n) for n in names], hw_name, args):
            try:
                if seed is None:
                    rival_cells(spot, hw_name, Path(args.data), work, cached_only=False)
                else:
                    seed_row(spot, hw_name, args.trials, seed, work)
            except Exception as exc:  # noqa: BLE001 - reported here and again, on its row, by the assembling pass
                failed.append(f"{spot.name}: {type(exc).__name__}: {exc}"[:200])
    took = (time.perf_counter() - start) / 60
    return f"{took:.1f} min" + (f"; failed: {'; '.join(failed)}" if failed else "")


def write_table(rows: list[dict], own: list[dict], bench: list[dict], hws: list[str], args, out: Path) -> None:
    seeds = f"trn1: median of seeds {args.seed}..{args.seed + args.seeds - 1}; trn2: {args.trn2_seeds} seed(s)"
    lines = [
        "# Results: Axon against op-by-op lowering, hand-written, compiler and tutorial kernels, and the roofline",
        "",
        f"Sim backend, default shapes, float32, {args.trials} trials per tuning ({seeds}), "
        "`python experiments/results_table.py`. compiler: the NKIBench compiler-style kernel measured on trn1 "
        "for that workload and shape; nki-samples: AWS's tutorial kernel at the same shape and dtype (version in "
        "brackets); both unmodified, checked by the emulator against their float64 reference and timed whole by "
        "the same simulator and hardware file as Axon (Axon's own kernels are timed by the sim backend, which "
        "extrapolates long loops; `bench_extrapolation.py` gives its error). On trn2 the compiler column is the same "
        "trn1 compiler kernels simulated with trn2's hardware file.",
        "",
    ]
    for hw_name in hws:
        here = [r for r in rows if r["hw"] == hw_name]
        lines += [f"## {hw_name}", "", report.MAIN_HEADER, "|" + "---|" * (report.MAIN_HEADER.count("|") - 1)]
        lines += [report.main_row(r) for r in here]
        notes = report.rival_notes(here)
        errors = [f"- {r['workload']}: {r['rival_error']}" for r in here if r.get("rival_error")]
        errors += [
            f"- {r['workload']}: {len(r['seed_errors'])} seed(s) failed: {r['seed_errors'][0][:200]}"
            for r in here
            if r.get("seed_errors") and r.get("axon_ns")
        ]
        if notes or errors:
            lines += ["", "Notes:", *notes, *errors]
        lines.append("")
    if bench:
        lines += [
            "## The seven NKIBench tasks (trn1)",
            "",
            "Measured: the compiler-style kernel profiled on one trn1 NeuronCore (`measured.json`, median); "
            "best found: the fastest kernel another optimizer (AccelOpt) found for the task, measured the same way "
            "(`best_found.json`). Axon predicted = measured compiler x Axon simulated / compiler simulated.",
            "",
            *report.bench_table(bench),
            "",
        ]
    if own:
        lines += [
            "## Against the tutorial kernels at their own shape and dtype (trn1)",
            "",
            "Axon tuned at the tutorial's shape and dtype with the same budget and seeds.",
            "",
            *report.own_table(own),
            "",
        ]
        notes = report.rival_notes(own)
        if notes:
            lines += ["Notes:", *notes, ""]
    if any(r.get("stale") for r in rows + own):
        lines += [
            "† the current code no longer emits the kernels this row reports (an earlier lowering's); "
            "`python experiments/results_table.py` re-tunes these rows.",
            "",
        ]
    (out / "results_table.md").write_text("\n".join(lines))
    plot(rows, out / "results_table.png")


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        trn1 = [r for r in rows if r["hw"] == "trn1" and r.get("axon_ns")]
        fig, ax = plt.subplots(figsize=(12, 4))
        names = [r["workload"] for r in trn1]
        xs = range(len(names))
        series = (
            (lambda r: r.get("unfused_default_ns"), "vs unfused-default"),
            (lambda r: r.get("unfused_tuned_ns"), "vs unfused-tuned"),
            (lambda r: r.get("expert_ns"), "vs ours-handwritten"),
            (lambda r: report.cell_ns(r, "compiler"), "vs compiler"),
            (lambda r: report.cell_ns(r, "nki_samples"), "vs nki-samples"),
        )
        width = 0.8 / len(series)
        for k, (get_ns, label) in enumerate(series):
            ax.bar(
                [i + width * (k - (len(series) - 1) / 2) for i in xs],
                [report.ratio(get_ns(r), r["axon_ns"]) or 0 for r in trn1],
                width=width,
                label=label,
            )
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=60, ha="right")
        ax.set_ylabel("speedup of Axon (trn1)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    except Exception as exc:  # the table is the result
        print(f"plot skipped: {exc}")


if __name__ == "__main__":
    main()
