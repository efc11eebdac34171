"""The pure half of `results_table.py`: combining seeds, the figures derived from the rows, the last
line and the markdown. No tuning and no simulation here (the unit tests run these on made-up rows).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

Row = dict[str, Any]


def geomean(xs: Iterable[float | None]) -> float:
    vals = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else float("nan")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of the seeds' values."""
    if not values:
        raise ValueError("spread of no values")
    return statistics.median(values), min(values), max(values)


def predicted_ms(measured_compiler_ms: float, axon_sim_ns: float, compiler_sim_ns: float) -> float:
    """Axon's latency on the hardware, predicted from one measured kernel: the measured compiler
    kernel scaled by how much faster or slower Axon's kernel simulates than the compiler's on the
    same simulator (the simulator's error on that kernel cancels, if it is the same on both)."""
    if not compiler_sim_ns > 0:
        raise ValueError(f"compiler simulated latency must be positive, got {compiler_sim_ns}")
    return measured_compiler_ms * axon_sim_ns / compiler_sim_ns


def combine_seeds(seed_rows: Sequence[Row]) -> Row:
    """One table row from the per-seed rows of a workload: Axon's and unfused-tuned's latency are the
    median over the seeds that produced one, with Axon's min and max; moves and point are those of
    the seed closest to the median; tuning seconds are summed (the row's cost)."""
    ok = [r for r in seed_rows if r.get("axon_ns")]
    if not ok:
        return dict(seed_rows[0])
    med, lo, hi = spread([r["axon_ns"] for r in ok])
    mid = min(ok, key=lambda r: (abs(r["axon_ns"] - med), r.get("seed", 0)))
    tuned = [r["unfused_tuned_ns"] for r in ok if r.get("unfused_tuned_ns")]
    return {
        **mid,
        "axon_ns": med,
        "axon_min": lo,
        "axon_max": hi,
        "axon_seeds": [r["axon_ns"] for r in ok],
        "seeds": [r.get("seed") for r in ok],
        "unfused_tuned_ns": statistics.median(tuned) if tuned else None,
        "tuning_s": sum(r.get("tuning_s") or 0.0 for r in ok),
        "stale": any(r.get("stale") for r in ok),
        "seed_errors": [r["error"] for r in seed_rows if r.get("error")],
    }


def nkibench_rows(rows: Sequence[Row], measured: dict[str, Any], best_found: dict[str, float]) -> list[Row]:
    """The second table: per NKIBench task of a trn1 row with both an Axon and a compiler latency."""
    out = []
    for r in rows:
        task, cell = r.get("compiler_task"), r.get("compiler") or {}
        if r.get("hw") != "trn1" or not task or not r.get("axon_ns") or not cell.get("ns"):
            continue
        meas = measured[task]["latency"]
        pred = predicted_ms(meas, r["axon_ns"], cell["ns"])
        out.append(
            {
                "task": task,
                "workload": r["workload"],
                "measured_ms": meas,
                "compiler_sim_ms": cell["ns"] / 1e6,
                "axon_sim_ms": r["axon_ns"] / 1e6,
                "predicted_ms": pred,
                "best_found_ms": best_found[task],
                "vs_best_found": best_found[task] / pred,
            }
        )
    return out


def last_line(trn1: Sequence[Row], own: Sequence[Row], bench: Sequence[Row], n_rows: int, n_tasks: int) -> str:
    """The trn1 summary line. `trn1`: the main table's trn1 rows; `own`: the rows at the tutorials' own
    shapes; `bench`: `nkibench_rows`; `n_rows`, `n_tasks`: how many rows and NKIBench tasks were asked
    for (the denominators of roofline70 and beats_best_found)."""
    done = [r for r in trn1 if r.get("axon_ns")]
    single = [ratio(r["unfused_default_ns"], r["axon_ns"]) for r in done if r["kind"] == "single"]
    multi = [ratio(r["unfused_default_ns"], r["axon_ns"]) for r in done if r["kind"] == "multi"]
    multi_tuned = [ratio(r.get("unfused_tuned_ns"), r["axon_ns"]) for r in done if r["kind"] == "multi"]
    handwritten = {r["workload"]: ratio(r.get("expert_ns"), r["axon_ns"]) for r in done if r.get("expert_ns")}
    roof = sum(1 for r in done if r["roofline_ns"] / r["axon_ns"] >= 0.7)
    compiler = [ratio(cell_ns(r, "compiler"), r["axon_ns"]) for r in done if cell_ns(r, "compiler")]
    samples = [
        ratio(cell_ns(r, "nki_samples"), r["axon_ns"])
        for r in [*done, *own]
        if r.get("axon_ns") and cell_ns(r, "nki_samples")
    ]
    nan = float("nan")

    def lowest(xs: Sequence[float | None]) -> float:
        vals = [x for x in xs if x]
        return min(vals) if vals else nan

    beats = sum(1 for b in bench if b["vs_best_found"] > 1.0)
    return (
        f"geomean_single_vs_default={geomean(single):.2f} geomean_multi_vs_default={geomean(multi):.2f} "
        f"geomean_multi_vs_unfused_tuned={geomean(multi_tuned):.2f} "
        f"max_speedup={max([x for x in single + multi if x] or [nan]):.2f} "
        f"ours_handwritten_min={lowest(list(handwritten.values())):.2f} "
        f"rmsnorm_matmul_vs_ours_handwritten={handwritten.get('rmsnorm_matmul') or nan:.2f} "
        f"roofline70={roof}/{n_rows} "
        f"geomean_vs_compiler={geomean(compiler):.2f} min_vs_compiler={lowest(compiler):.2f} "
        f"vs_nki_samples_min={lowest(samples):.2f} vs_nki_samples_geomean={geomean(samples):.2f} "
        f"predicted_vs_best_found_geomean={geomean(b['vs_best_found'] for b in bench):.2f} "
        f"beats_best_found={beats}/{n_tasks}"
    )


def cell_ns(row: Row, kind: str) -> float | None:
    cell = row.get(kind) or {}
    return cell.get("ns")


# ---- markdown -------------------------------------------------------------------------------------


def us(ns: float | None) -> str:
    return "" if not ns else f"{ns / 1e3:,.1f}"


def times(a: float | None, b: float | None) -> str:
    v = ratio(a, b)
    return "" if v is None else f"{v:.2f}x"


def seeds_cell(r: Row) -> str:
    """`min-max (n)` of Axon's seeds, in us."""
    n = len(r.get("axon_seeds") or [])
    if n <= 1:
        return "1 seed" if n else ""
    return f"{r['axon_min'] / 1e3:,.1f}-{r['axon_max'] / 1e3:,.1f} ({n})"


def rival_cell(r: Row, kind: str, versioned: bool) -> str:
    cell = r.get(kind) or {}
    if not cell.get("ns"):
        return "no version ran" if cell.get("versions") else ""
    return us(cell["ns"]) + (f" ({cell['label']})" if versioned and cell.get("label") else "")


MAIN_HEADER = (
    "| workload | kind | axon (us, median) | axon seeds min-max (us) | unfused-default (us) | unfused-tuned (us) "
    "| ours-handwritten (us) | compiler (us) | nki-samples (us) | roofline (us) | vs default | vs unfused-tuned "
    "| vs ours-handwritten | vs compiler | vs nki-samples | of roofline | moves | tuning s (all seeds) | trials |"
)


def main_row(r: Row) -> str:
    columns = MAIN_HEADER.count("|") - 1
    if "error" in r and not r.get("axon_ns"):
        what = "not measured yet" if r["error"].startswith("LookupError") else f"failed: {r['error'][:120]}"
        return f"| {r['workload']} | {r['kind']} | {what} |" + " |" * (columns - 3)
    cells = [
        r["workload"] + (" †" if r.get("stale") else ""),
        r["kind"],
        us(r["axon_ns"]),
        seeds_cell(r),
        us(r["unfused_default_ns"]),
        us(r.get("unfused_tuned_ns")),
        us(r.get("expert_ns")),
        rival_cell(r, "compiler", False),
        rival_cell(r, "nki_samples", True),
        us(r["roofline_ns"]),
        times(r["unfused_default_ns"], r["axon_ns"]),
        times(r.get("unfused_tuned_ns"), r["axon_ns"]),
        times(r.get("expert_ns"), r["axon_ns"]),
        times(cell_ns(r, "compiler"), r["axon_ns"]),
        times(cell_ns(r, "nki_samples"), r["axon_ns"]),
        f"{r['roofline_ns'] / r['axon_ns']:.0%}",
        " + ".join(r.get("moves") or []) or "-",
        f"{r.get('tuning_s') or 0:.0f}",
        str(r.get("trials", "")),
    ]
    return "| " + " | ".join(cells) + " |"


def version_label(name: str | None) -> str:
    """`attention_v8@H16xS4096xD128:float32` -> `v8`; `silu_M4096_N7168` -> `silu_M4096_N7168`."""
    if not name:
        return ""
    base = name.split("@")[0]
    for prefix in ("attention_", "layernorm_", "matmul_"):
        if base.startswith(prefix) and "@" in name:
            return base[len(prefix) :]
    return base


def rival_notes(rows: Sequence[Row]) -> list[str]:
    """One line per row with a compiler or nki-samples cell: which kernel, and each version that did
    not run at the row's shape and dtype, with the reason."""
    notes: list[str] = []
    for r in rows:
        for kind, title in (("compiler", "compiler"), ("nki_samples", "nki-samples")):
            cell = r.get(kind)
            if not cell:
                continue
            versions = cell.get("versions", {})
            failed = [f"{version_label(name)}: {v['error']}" for name, v in versions.items() if not v.get("ns")]
            ran = [version_label(name) for name, v in versions.items() if v.get("ns")]
            if len(ran) <= 1 and not failed and not cell.get("note"):
                continue  # one kernel that ran, nothing to add
            parts = [f"{r.get('label', r['workload'])} ({r['hw']}), {title}: "]
            parts.append(f"{version_label(cell.get('version'))} is the cell" if cell.get("ns") else "nothing ran")
            if len(ran) > 1:
                parts.append(f" (fastest of {', '.join(ran)})")
            if cell.get("note"):
                parts.append(f"; {cell['note']}")
            if failed:
                parts.append("; could not run: " + "; ".join(failed))
            notes.append("- " + "".join(parts))
    return notes


def bench_table(bench: Sequence[Row]) -> list[str]:
    lines = [
        "| task | measured compiler (ms) | simulated compiler (ms) | Axon simulated (ms) | Axon predicted (ms) "
        "| best found (ms) | predicted vs best found |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in bench:
        lines.append(
            f"| {b['task']} | {b['measured_ms']:.3f} | {b['compiler_sim_ms']:.3f} | {b['axon_sim_ms']:.3f} "
            f"| {b['predicted_ms']:.3f} | {b['best_found_ms']:.3f} | {b['vs_best_found']:.2f}x |"
        )
    return lines


def own_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| workload at the tutorial's shape | dtype | axon (us, median) | axon seeds min-max (us) | nki-samples (us) "
        "| vs nki-samples | moves | tuning s (all seeds) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.get("axon_ns"):
            lines.append(f"| {r['label']} | {r.get('dtype', '')} | failed: {r.get('error', '')[:120]} | | | | | |")
            continue
        lines.append(
            f"| {r['label']} | {r['dtype']} | {us(r['axon_ns'])} | {seeds_cell(r)} "
            f"| {rival_cell(r, 'nki_samples', True)} "
            f"| {times(cell_ns(r, 'nki_samples'), r['axon_ns'])} | {' + '.join(r.get('moves') or []) or '-'} "
            f"| {r.get('tuning_s') or 0:.0f} |"
        )
    return lines
