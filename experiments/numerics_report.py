"""Floating-point safety of tuned kernels: the chosen variant, its worst error per adversarial input
class, and the proved variants the floating-point gate did not offer, and why.

For softmax, attention, layernorm, add + layernorm and logsumexp (the last two from examples/), at
float32 and bfloat16: `tune(..., preset="small", trials=6)` on the sim backend (the tuner itself
runs the adversarial check on the chosen kernel in the NKI emulator and fails if it does not pass).
For the first rejected variant of each row, the same check on that variant's kernel (default
point) shows what the gate kept out of the tuner.

    .venv/bin/python experiments/numerics_report.py [--trials 6] [--out experiments/results/numerics.md]

Last line: rows=N chosen_pass=K/N rejected=R rejected_kernels_fail=F/G worst_f32=X worst_bf16=Y
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

import checkout  # this repository's axon ahead of an installed one

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = checkout.REPO

from axon.search.api import TuneRequest, tune  # noqa: E402
from axon.search.checks import FINITE_EDGE, adversarial_check  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.verify.adversarial import CLASSES  # noqa: E402
from axon.workloads import get  # noqa: E402

COLUMNS = (*CLASSES, FINITE_EDGE)  # the last only where an input's finite range is wider than its accurate one
WORKLOADS = {
    "softmax": "softmax",
    "attention": "attention",
    "layernorm": "layernorm",
    "add_layernorm": f"{REPO}/examples/add_layernorm.py:add_layernorm",
    "logsumexp": f"{REPO}/examples/logsumexp.py:logsumexp",
}


def rejected_kernel(ref: str, dtype: str, rejection, kernels: Path) -> str:
    """The adversarial figures of a rejected variant's kernel at its default point."""
    w = get(ref)
    graph = w.graph("small", dtype=dtype)
    variant = rejection.variant
    problem = LoweredProblem(w.name, graph, load_hw("trn1"), [variant], dtype)
    if not problem.variants:
        return "does not lower"
    report = adversarial_check(problem, problem.default_point(0), kernels)
    return ("FAILS: " if not report.ok else "passes: ") + report.summary()


def fmt(x: float) -> str:
    return "-" if math.isnan(x) else "inf" if not math.isfinite(x) else f"{x:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--out", default=None, help="Also write the table (markdown) here.")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="axon-numerics-"))
    lines = [
        "| workload | dtype | chosen variant | " + " | ".join(COLUMNS) + " | check | rejected for floating point |",
        "|---" * (len(COLUMNS) + 5) + "|",
    ]
    rows = passed = rejected_total = rejected_fail = rejected_checked = 0
    worst = {"float32": 0.0, "bfloat16": 0.0}
    for dtype in args.dtypes.split(","):
        for name in args.workloads.split(","):
            report = tune(
                TuneRequest.make(
                    WORKLOADS[name],
                    preset="small",
                    trials=args.trials,
                    dtype=dtype,
                    workdir=work / f"{name}-{dtype}",
                    track=False,
                    seed=0,
                )
            )
            adv = report.adversarial
            rows += 1
            passed += bool(adv and adv.ok)
            figures = adv.worst() if adv else {}
            worst[dtype] = max([worst.get(dtype, 0.0), *figures.values()])
            rejected_total += len(report.fp_rejected)
            print(
                f"== {name} {dtype}: chosen {' + '.join(report.moves) or 'as written'} [id {report.variant_id[:8]}], "
                f"{report.best_latency_ns / 1e3:,.1f} us"
            )
            print(f"   ranges: {adv.ranges if adv else '-'}")
            print(
                f"   adversarial worst rel err per class: {adv.summary() if adv else '-'} "
                f"{'OK' if adv and adv.ok else 'FAILED'}"
            )
            for text in report.fp_rejected:
                print(f"   not offered: {text}")
            if report.fp_rejected:
                from axon.search.api import verified_variants

                found: list = []
                verified_variants(get(WORKLOADS[name]).graph("small", dtype=dtype), rejected=found)
                first = found[0]
                figures_rejected = rejected_kernel(WORKLOADS[name], dtype, first, work / "kernels")
                rejected_checked += 1
                rejected_fail += figures_rejected.startswith("FAILS")
                print(f"   kernel of '{first.describe().split(':')[0]}' on the same classes: {figures_rejected}")
            moves_rejected = sorted({t.split(":")[0] for t in report.fp_rejected})
            lines.append(
                f"| {name} | {dtype} | {' + '.join(report.moves) or 'as written'} | "
                + " | ".join(fmt(figures.get(c, float("nan"))) for c in COLUMNS)
                + f" | {'pass' if adv and adv.ok else 'FAIL'} | {'; '.join(moves_rejected) or '-'} |"
            )
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    print(
        f"rows={rows} chosen_pass={passed}/{rows} rejected={rejected_total} "
        f"rejected_kernels_fail={rejected_fail}/{rejected_checked} "
        f"worst_f32={worst.get('float32', 0.0):.2e} worst_bf16={worst.get('bfloat16', 0.0):.2e}"
    )


if __name__ == "__main__":
    main()
