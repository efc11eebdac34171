"""Sample efficiency of the cost-model sampler against TPE and random search, and cost-model transfer.

For each workload (default shape, trn1, sim backend) and seed, each sampler tunes with the same
trial budget; best-so-far latency is recorded per measurement. A run's tuner sees only its own
records (a fresh RecordDB per run), while identical kernels are simulated once across runs through
a shared measurement cache (the simulator is deterministic, so this changes no result, only time).

Transfer: a cost model trained on records of three other shapes of rmsnorm_matmul tunes the
held-out default shape; we count measurements until it is within 5% of the best latency found for
it. The headline trains on what sweeps over those shapes leave (cost-model-tuned records); the
same count for a model trained on random-search records of the same shapes is reported beside it.

Every run's curve is kept in `--work` as it finishes, so an interrupted run resumes, and
`--runs-only` with a subset of `--workloads` lets several processes share the work (the summary
is written by a final run over all workloads, which only reads what is there).

Last line: median_ratio_tpe_over_costmodel=X costmodel_beats_random=N/5 transfer_measurements=M
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.measure.backend import Measurement, SimBackend  # noqa: E402
from axon.measure.events import OnTrial  # noqa: E402
from axon.measure.records import RecordDB  # noqa: E402
from axon.search.api import verified_variants  # noqa: E402
from axon.search.costmodel import CostModel  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.search.tuner import TuneConfig, Tuner  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import get  # noqa: E402

RESULTS = Path(__file__).parent / "results"
WORKLOADS = ("rmsnorm_matmul", "attention", "swiglu", "layernorm_matmul", "matmul")
SAMPLERS = ("costmodel", "tpe", "random")
TRANSFER_TRAINING = {"costmodel": "cost-model-tuned records (what sweeps leave)", "random": "random-search records"}


class CachedSim:
    """The sim backend with a persistent cache keyed by kernel source hash, hardware file and simulator version."""

    name = "sim"

    @property
    def version(self) -> str:
        return self.inner.version

    def __init__(self, path: Path) -> None:
        self.inner = SimBackend()
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("CREATE TABLE IF NOT EXISTS m (k TEXT PRIMARY KEY, v TEXT)")
        self.hits = self.misses = 0

    def measure(self, source, kernel, inputs, hw):
        from axon.measure.backend import kernel_hash

        key = f"{kernel_hash(source)}@{hw.file_hash}@{self.version}"
        row = self.db.execute("SELECT v FROM m WHERE k=?", (key,)).fetchone()
        if row:
            self.hits += 1
            return Measurement(**json.loads(row[0]))
        self.misses += 1
        m = self.inner.measure(source, kernel, inputs, hw)
        self.db.execute("INSERT OR REPLACE INTO m VALUES (?, ?)", (key, json.dumps(m.as_dict())))
        return m


def problem_for(name: str, hw, dims: dict | None = None) -> LoweredProblem:
    graph = get(name).graph("default", **(dims or {}))
    return LoweredProblem(name, graph, hw, verified_variants(graph), "float32")


def run_one(problem, backend, sampler: str, seed: int, trials: int, model: CostModel | None = None) -> list[float]:
    """Best-so-far latency after each of the first `trials` measurements.

    The budget counts measurements, not Optuna trials: TPE and random propose infeasible points
    (told to Optuna as failed, no measurement), so they get up to 4x the trials to make `trials`
    measurements; the cost-model sampler only proposes points that lower."""
    with tempfile.TemporaryDirectory() as tmp:
        db = RecordDB(Path(tmp) / "records.db")
        asks = trials if sampler == "costmodel" else 4 * trials
        tuner = Tuner(
            problem,
            backend,
            db,
            TuneConfig(trials=asks, sampler=sampler, seed=seed),
            storage=None,
            model=model or CostModel(seed=seed),
            callbacks=[OnTrial(_stop_after(trials))],
        )
        try:
            result = tuner.run()
            logs = result.trials
        except _Enough as done:
            logs = done.logs
    curve, best = [], float("inf")
    for log in logs:
        if log.status in ("measured", "reused"):
            best = min(best, log.latency_ns)
            curve.append(best)
    return curve[:trials]


class _Enough(Exception):
    def __init__(self, logs):
        self.logs = logs


def _stop_after(measurements: int):
    logs = []

    def hook(log):
        logs.append(log)
        if sum(1 for l in logs if l.status in ("measured", "reused")) >= measurements:
            raise _Enough(list(logs))

    return hook


def _kept(path: Path, run) -> list[float]:
    """The curve stored at `path`, or run it and store it (written whole, so a kill leaves no half file)."""
    if path.exists():
        return json.loads(path.read_text())
    curve = run()
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(curve))
    tmp.replace(path)
    return curve


def _transfer(hw, backend, trials: int, train_sampler: str = "random") -> list[float]:
    """A cost model trained on the records of three other rmsnorm_matmul shapes, frozen, then
    tuning the held-out default shape for 16 measurements. The other shapes are tuned with
    `train_sampler`: "random" (unbiased records, mostly of poor kernels) or "costmodel" (what a
    sweep over those shapes leaves in the record database: its records crowd the fast kernels)."""
    train_shapes = [dict(M=1024, K=1024, N=2048), dict(M=2048, K=512, N=1024), dict(M=4096, K=2048, N=1024)]
    with tempfile.TemporaryDirectory() as tmp:
        db = RecordDB(Path(tmp) / "train.db")
        for i, dims in enumerate(train_shapes):
            Tuner(
                problem_for("rmsnorm_matmul", hw, dims),
                backend,
                db,
                TuneConfig(trials=trials, sampler=train_sampler, seed=100 + i),
            ).run()
        model = CostModel(seed=0)
        model.fit(db.records(), holdout=0.0)
        model.freeze()  # the held-out run adds trees on top of what the other shapes taught
        return run_one(problem_for("rmsnorm_matmul", hw), backend, "costmodel", 0, 16, model=model)


def to_within(curve: list[float], target: float, budget: int) -> int:
    for i, v in enumerate(curve):
        if v <= target:
            return i + 1
    return 2 * budget  # not reached within the budget: counted as twice the budget


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="with --runs-only: run seeds FIRST..SEEDS-1 (another process has the rest)",
    )
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--cache", default=str(RESULTS / "work" / "sim_cache.db"))
    ap.add_argument("--work", default=str(RESULTS / "work" / "sample_efficiency"), help="one JSON curve per run")
    ap.add_argument("--runs-only", action="store_true", help="measure the runs of --workloads, write no summary")
    ap.add_argument(
        "--at",
        type=int,
        default=None,
        help="summarize the first AT measurements of each run (into sample_efficiency_atAT.md): those a run of "
        "budget AT makes, except that TPE and random, allowed 4 asks per measurement, may have used more asks",
    )
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
    hw = load_hw("trn1")
    backend = CachedSim(Path(args.cache))
    names = [n for n in args.workloads.split(",") if n != "transfer"]
    if "transfer" in args.workloads.split(","):  # the transfer run on its own, for a parallel process
        for kind in TRANSFER_TRAINING:
            _kept(
                work / f"transfer_{kind}_{args.trials}.json",
                lambda: _transfer(hw, backend, args.trials, kind),  # noqa: B023  _kept runs it now, in this iteration
            )
    curves: dict[str, dict[str, list[list[float]]]] = {}
    t0 = time.time()
    for name in names:
        problem = problem_for(name, hw)
        curves[name] = {s: [] for s in SAMPLERS}
        for seed in range(args.first_seed if args.runs_only else 0, args.seeds):
            for sampler in SAMPLERS:
                curves[name][sampler].append(
                    _kept(
                        work / f"{name}_{sampler}_{seed}_{args.trials}.json",
                        lambda: run_one(problem, backend, sampler, seed, args.trials),  # noqa: B023  _kept runs it now
                    )
                )
            print(
                f"{name} seed {seed}: "
                + " ".join(f"{s}={curves[name][s][-1][-1] / 1e3:.1f}us" for s in SAMPLERS)
                + f"  ({time.time() - t0:.0f} s, cache {backend.hits} hits / {backend.misses} misses)",
                flush=True,
            )
    if args.runs_only:
        return
    args.budget = args.at or args.trials
    curves = {name: {s: [c[: args.budget] for c in runs] for s, runs in by.items()} for name, by in curves.items()}

    ratios, beats, rows = [], 0, []
    for name in names:
        best = min(min(c) for s in SAMPLERS for c in curves[name][s] if c)
        target = best * 1.05
        need = {s: [to_within(c, target, args.budget) for c in curves[name][s]] for s in SAMPLERS}
        for cm, tpe in zip(need["costmodel"], need["tpe"]):
            ratios.append(tpe / cm)
        if statistics.median(need["costmodel"]) < statistics.median(need["random"]):
            beats += 1
        final = {s: statistics.median(c[-1] for c in curves[name][s] if c) for s in SAMPLERS}
        rows.append((name, best, {s: statistics.median(need[s]) for s in SAMPLERS}, final))

    transfer_curves = {
        kind: _kept(
            work / f"transfer_{kind}_{args.trials}.json",
            lambda: _transfer(hw, backend, args.trials, kind),  # noqa: B023  _kept runs it now, in this iteration
        )
        for kind in TRANSFER_TRAINING
    }
    best_rmm = min(min(c) for s in SAMPLERS for c in curves.get("rmsnorm_matmul", {}).get(s, [[float("inf")]]))
    best_rmm = min([best_rmm] + [min(c) for c in transfer_curves.values()])
    transfers = {kind: to_within(c, best_rmm * 1.05, 16) for kind, c in transfer_curves.items()}
    transfer = transfers["costmodel"]

    _write(rows, curves, names, args, ratios, beats, transfers)
    median_ratio = statistics.median(ratios)
    print(
        f"median_ratio_tpe_over_costmodel={median_ratio:.2f} costmodel_beats_random={beats}/{len(names)} "
        f"transfer_measurements={transfer}"
    )


def _write(rows, curves, names, args, ratios, beats, transfers) -> None:
    RESULTS.mkdir(exist_ok=True)
    lines = [
        "# Sample efficiency (trn1, sim backend, default shapes)",
        "",
        f"Budget {args.budget} measurements per run"
        + (f" (the first {args.budget} of runs of {args.trials})" if args.budget != args.trials else "")
        + f", {args.seeds} seeds. "
        "Measurements to reach within 5% of the best latency any "
        "method found (median over seeds; a run that never gets there counts as twice the budget).",
        "",
        "The last three columns are the median best latency at the end of the budget. "
        "TPE and random get up to four asks "
        "per measurement (they propose points that do not lower); a run that used them up with fewer measurements "
        "keeps its last best, in the plot too.",
        "",
        "| workload | best (us) | costmodel | tpe | random "
        "| final costmodel (us) | final tpe (us) | final random (us) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, best, med, final in rows:
        lines.append(
            f"| {name} | {best / 1e3:,.1f} | {med['costmodel']} | {med['tpe']} | {med['random']} | "
            + " | ".join(f"{final[s] / 1e3:,.1f}" for s in SAMPLERS)
            + " |"
        )
    ahead = {
        other: sum(1 for _, _, _, final in rows if final["costmodel"] < final[other]) for other in ("random", "tpe")
    }
    lines += [
        "",
        f"Median ratio TPE / cost model: {statistics.median(ratios):.2f}; "
        f"cost model beats random on {beats}/{len(names)} "
        "(median measurements to within 5%; a tie at 'not reached' does not count).",
        "By median best latency at the end of the budget the cost model is ahead of random "
        f"on {ahead['random']}/{len(names)} "
        f"and of TPE on {ahead['tpe']}/{len(names)}.",
        "Transfer (rmsnorm_matmul at its default shape, a model trained on three other shapes, 16 measurements; "
        "32 = not reached): "
        + "; ".join(f"trained on {TRANSFER_TRAINING[k]}: {v} measurements to within 5%" for k, v in transfers.items())
        + ".",
        "",
    ]
    stem = "sample_efficiency" + (f"_at{args.budget}" if args.budget != args.trials else "")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2))
        for ax, name in zip(axes if len(names) > 1 else [axes], names):
            for s in SAMPLERS:
                runs = [c for c in curves[name][s] if c]
                n = max(len(c) for c in runs)  # a TPE or random run that spent its asks on points that do not lower
                med = [
                    statistics.median(c[min(i, len(c) - 1)] for c in runs) / 1e3 for i in range(n)
                ]  # keeps its last best
                ax.plot(range(1, n + 1), med, label=s)
            ax.set_title(name)
            ax.set_xlabel("measurements")
            ax.set_ylabel("best latency (us)")
        axes[0].legend() if len(names) > 1 else axes.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / f"{stem}.png", dpi=100)
    except Exception as exc:  # the table is the result; the plot is a convenience
        print(f"plot skipped: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
