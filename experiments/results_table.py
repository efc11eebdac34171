"""The results table: Axon tuned against unfused-default, unfused-tuned, expert kernels and the roofline.

For each of the 20 workloads at its default shape, on trn1 and trn2, with the sim backend:
- unfused-default: every op its own kernel (fusion=unfused) at the space's default point;
- unfused-tuned: the same op-by-op lowering, tuned by Axon with the same budget and seed;
- expert: the hand-written kernels of `axon.lower.expert` (where one exists);
- roofline: max(TensorE time at peak, HBM time of the minimum bytes);
- axon: full search over verified variants x schedule space (cost-model sampler).
Rows are keyed by what the code emits: a row stays while the current code still emits the kernels
it reports (its best and its unfused-tuned kernel, checked by `axon.search.current.CurrentCode`
against the records in experiments/results/work/tuning/<hw>/records.db), and is tuned again
otherwise; a refactor that changes no kernel re-tunes nothing. Within one table the rows share that
database, in the table's order (a later row's cost model trains on the records of the rows before
it, as a nightly sweep's does); an interrupted table resumes where it stopped.

Last line (trn1): geomean_single_vs_default=A geomean_multi_vs_default=B geomean_multi_vs_unfused_tuned=C
max_speedup=D expert_min=E rmsnorm_matmul_vs_expert=F roofline70=N/20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.measure.backend import SimBackend, kernel_hash  # noqa: E402
from axon.measure.records import RecordDB  # noqa: E402
from axon.search.api import TuneRequest, expert_latency, tune, verified_variants  # noqa: E402
from axon.search.current import CurrentCode  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.search.sampler import point_key  # noqa: E402
from axon.search.tuner import TuneConfig, Tuner  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import all_workloads  # noqa: E402

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


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def problems(w, hw_name: str) -> tuple[LoweredProblem, UnfusedProblem]:
    """The row's two search problems: the full space, and the op-by-op space (label unfused_tuned)."""
    hw = load_hw(hw_name)
    graph = w.graph("default")
    full = LoweredProblem(w.name, graph, hw, verified_variants(graph), "float32")
    unfused = UnfusedProblem(w.name, graph, hw, [Original(graph)], "float32", label="unfused_tuned")
    return full, unfused


def row_current(row: dict, w, hw_name: str, db: RecordDB) -> bool:
    """A row is current when the current code still emits the kernels it reports (its best kernel
    and its unfused-tuned kernel, looked up by hash in the table's records): the one currency check
    of `axon.search.current`, so a refactor that emits the same kernels keeps every row."""
    kernels = row.get("kernels")
    if not kernels:
        return False
    for problem in problems(w, hw_name):
        which = "unfused_tuned" if problem.label else "axon"
        record = next((r for r in db.records(task=problem.task) if r.kernel_hash == kernels.get(which)), None)
        if record is None or not CurrentCode(problem)(record):
            return False
    return True


def row_for(w, hw_name: str, trials: int, seed: int, work: Path, cached_only: bool = False) -> dict:
    cache = work / "rows" / f"{w.name}_{hw_name}_{trials}_{seed}.json"
    tuning = work / "tuning" / hw_name
    row = json.loads(cache.read_text()) if cache.exists() else None
    if row is not None and not row_current(row, w, hw_name, RecordDB(tuning / "records.db")):
        if not cached_only:
            row = None  # the code emits other kernels than this row reports: tune it again
        else:
            row["stale"] = True  # kept, and marked as such in the table
    if row is not None:
        if row.get("expert_hash") != _expert_hash(w.name):  # the hand-written kernel changed: re-measure it alone
            row["expert_ns"] = expert_latency(w.name, w.graph("default"), load_hw(hw_name), SimBackend())
            row["expert_hash"] = _expert_hash(w.name)
            _store(cache, row)
        return row
    if cached_only:
        raise LookupError("not measured yet (--cached-only)")
    start = time.perf_counter()
    request = TuneRequest.make(
        w.name,
        hw=hw_name,
        trials=trials,
        seed=seed,
        workdir=tuning,
        track=False,
        study=f"table:{w.name}:{hw_name}:{seed}",
    )
    report = tune(request)
    tuning_s = time.perf_counter() - start
    full, unfused = problems(w, hw_name)
    db = RecordDB(tuning / "records.db")
    config = TuneConfig(
        trials=trials, sampler="costmodel", seed=seed, study_name=f"table-unfused:{w.name}:{hw_name}:{seed}"
    )
    result = Tuner(unfused, SimBackend(), db, config, storage=None).run()
    best = CurrentCode(full).best(db.records(task=full.task))
    row = {
        "workload": w.name,
        "kind": w.kind,
        "hw": hw_name,
        "axon_ns": report.best_latency_ns,
        "unfused_default_ns": report.unfused_ns,
        "unfused_tuned_ns": result.best.latency_ns if result.best else None,
        "expert_ns": report.expert_ns,
        "roofline_ns": report.roofline_ns,
        "moves": list(report.moves),
        "point": report.best_description,
        "tuning_s": tuning_s,
        "trials": trials,
        "numerics_ok": report.numerics.ok if report.numerics else None,
        "expert_hash": _expert_hash(w.name),
        "kernels": {
            "axon": best.kernel_hash if best else None,
            "unfused_tuned": result.best.kernel_hash if result.best else None,
        },
    }
    _store(cache, row)
    return row


def _expert_hash(workload: str) -> str | None:
    from axon.lower import expert

    return kernel_hash(expert.source(workload)) if workload in expert.KERNELS else None


def _store(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)


def ratio(a, b):
    return a / b if a and b else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hw", default="trn1,trn2")
    ap.add_argument("--workloads", default="")
    ap.add_argument("--cached-only", action="store_true", help="write the table from the rows already measured")
    args = ap.parse_args()
    work = RESULTS / "work"
    work.mkdir(parents=True, exist_ok=True)
    chosen = [w for w in all_workloads() if not args.workloads or w.name in args.workloads.split(",")]
    rows = []
    for hw_name in args.hw.split(","):
        for w in chosen:
            try:
                rows.append(row_for(w, hw_name, args.trials, args.seed, work, args.cached_only))
            except Exception as exc:  # one failing workload must not hide the rest of the table
                rows.append(
                    {"workload": w.name, "kind": w.kind, "hw": hw_name, "error": f"{type(exc).__name__}: {exc}"}
                )
            r = rows[-1]
            print(
                f"{hw_name} {w.name}: "
                + (f"axon {r['axon_ns'] / 1e3:,.1f} us" if r.get("axon_ns") else r.get("error", "")[:200]),
                flush=True,
            )
    write_table(rows, args)
    fresh = sum(1 for r in rows if r.get("axon_ns") and not r.get("stale"))
    print(f"rows whose kernels the current code still emits: {fresh}/{len(rows)}")
    trn1 = [r for r in rows if r["hw"] == "trn1" and r.get("axon_ns")]
    single = [ratio(r["unfused_default_ns"], r["axon_ns"]) for r in trn1 if r["kind"] == "single"]
    multi = [ratio(r["unfused_default_ns"], r["axon_ns"]) for r in trn1 if r["kind"] == "multi"]
    multi_tuned = [ratio(r["unfused_tuned_ns"], r["axon_ns"]) for r in trn1 if r["kind"] == "multi"]
    vs_expert = {r["workload"]: ratio(r["expert_ns"], r["axon_ns"]) for r in trn1 if r.get("expert_ns")}
    roof = sum(1 for r in trn1 if r["roofline_ns"] / r["axon_ns"] >= 0.7)
    max_speedup = max([x for x in single + multi if x] or [float("nan")])
    expert_min = min(vs_expert.values()) if vs_expert else float("nan")
    print(
        f"geomean_single_vs_default={geomean(single):.2f} geomean_multi_vs_default={geomean(multi):.2f} "
        f"geomean_multi_vs_unfused_tuned={geomean(multi_tuned):.2f} max_speedup={max_speedup:.2f} "
        f"expert_min={expert_min:.2f} rmsnorm_matmul_vs_expert={vs_expert.get('rmsnorm_matmul', float('nan')):.2f} "
        f"roofline70={roof}/{len(chosen)}"
    )


def write_table(rows, args) -> None:
    def us(ns):
        return "" if not ns else f"{ns / 1e3:,.1f}"

    def x(a, b):
        v = ratio(a, b)
        return "" if v is None else f"{v:.2f}x"

    lines = [
        "# Results: Axon against op-by-op lowering, expert kernels and the roofline",
        "",
        f"Sim backend, default shapes, float32, {args.trials} trials per tuning (seed {args.seed}), "
        "`python experiments/results_table.py`.",
        "",
    ]
    for hw_name in args.hw.split(","):
        lines += [
            f"## {hw_name}",
            "",
            "| workload | kind | axon (us) | unfused-default (us) | unfused-tuned (us) | expert (us) | roofline (us) "
            "| vs default | vs unfused-tuned | vs expert | of roofline | moves | tuning s | trials |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r["hw"] != hw_name:
                continue
            if "error" in r and r["error"].startswith("LookupError"):
                lines.append(f"| {r['workload']} | {r['kind']} | not measured yet |" + " |" * 11)
                continue
            if "error" in r:
                lines.append(f"| {r['workload']} | {r['kind']} | failed: {r['error'][:120]} |" + " |" * 11)
                continue
            lines.append(
                "| "
                + " | ".join(
                    [
                        r["workload"] + (" †" if r.get("stale") else ""),
                        r["kind"],
                        us(r["axon_ns"]),
                        us(r["unfused_default_ns"]),
                        us(r["unfused_tuned_ns"]),
                        us(r["expert_ns"]),
                        us(r["roofline_ns"]),
                        x(r["unfused_default_ns"], r["axon_ns"]),
                        x(r["unfused_tuned_ns"], r["axon_ns"]),
                        x(r["expert_ns"], r["axon_ns"]),
                        f"{r['roofline_ns'] / r['axon_ns']:.0%}",
                        " + ".join(r["moves"]) or "-",
                        f"{r['tuning_s']:.0f}",
                        str(r.get("trials", "")),
                    ]
                )
                + " |"
            )
        lines.append("")
    if any(r.get("stale") for r in rows):
        lines += [
            "† the current code no longer emits the kernels this row reports (an earlier lowering's); "
            "`python experiments/results_table.py` re-tunes these rows.",
            "",
        ]
    (RESULTS / "results_table.md").write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        trn1 = [r for r in rows if r["hw"] == "trn1" and r.get("axon_ns")]
        fig, ax = plt.subplots(figsize=(12, 4))
        names = [r["workload"] for r in trn1]
        xs = range(len(names))
        for k, (key, label) in enumerate(
            (
                ("unfused_default_ns", "vs unfused-default"),
                ("unfused_tuned_ns", "vs unfused-tuned"),
                ("expert_ns", "vs expert"),
            )
        ):
            ax.bar(
                [i + 0.27 * (k - 1) for i in xs],
                [ratio(r.get(key), r["axon_ns"]) or 0 for r in trn1],
                width=0.27,
                label=label,
            )
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=60, ha="right")
        ax.set_ylabel("speedup of Axon (trn1)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "results_table.png", dpi=100)
    except Exception as exc:  # the table is the result
        print(f"plot skipped: {exc}")


if __name__ == "__main__":
    main()
