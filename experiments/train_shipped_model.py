"""Train the cost model shipped in models/: random-search records over workloads and shapes on trn1.

Each task is tuned with the random sampler (unbiased training data) on the sim backend; the model is
trained on every record and evaluated on a held-out fifth (by kernel hash). Writes
models/axon-costmodel-trn1.json and models/README.md (the model card).
Last line: records=N tasks=T heldout_pairwise=X heldout_peak1=Y heldout_peak5=Z
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.measure.backend import SimBackend  # noqa: E402
from axon.measure.records import RecordDB  # noqa: E402
from axon.search.api import verified_variants  # noqa: E402
from axon.search.costmodel import CostModel  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.search.tuner import TuneConfig, Tuner  # noqa: E402
from axon.shipped import MODELS_DIR  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import get  # noqa: E402

MODELS = MODELS_DIR  # package data; the repository's models/ links there
TASKS = [
    ("rmsnorm_matmul", "small", {}),
    ("rmsnorm_matmul", "default", {"M": 1024}),
    ("rmsnorm_matmul", "default", {"M": 2048, "N": 1024}),
    ("layernorm_matmul", "small", {}),
    ("layernorm_matmul", "default", {"M": 512, "K": 1024, "N": 1024}),
    ("softmax", "small", {}),
    ("softmax", "default", {"M": 1024}),
    ("rmsnorm", "default", {"M": 1024}),
    ("matmul", "small", {}),
    ("matmul", "default", {"M": 1024, "K": 1024, "N": 2048}),
    ("swiglu", "small", {}),
    ("attention", "small", {}),
    ("attention", "default", {"H": 2, "S": 1024}),
    ("lora", "small", {}),
    ("layernorm", "default", {"M": 1024}),
    ("add_rmsnorm_matmul", "small", {}),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--work", default=str(Path(__file__).parent / "results" / "model_work"))
    args = ap.parse_args()
    hw = load_hw("trn1")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    db = RecordDB(work / "records.db")
    start = time.time()
    for i, (name, preset, dims) in enumerate(TASKS):
        graph = get(name).graph(preset, **dims)
        problem = LoweredProblem(name, graph, hw, verified_variants(graph), "float32")
        Tuner(problem, SimBackend(), db, TuneConfig(trials=args.trials, sampler="random", seed=i)).run()
        print(f"{name} {graph.bindings}: {len(db)} records ({time.time() - start:.0f} s)", flush=True)
    records = [r for r in db.records() if r.kind == "kernel" and not r.label]
    model = CostModel(seed=0)
    acc = model.fit(records, holdout=0.2)
    MODELS.mkdir(exist_ok=True)
    model.save(MODELS / "axon-costmodel-trn1.json")
    ok = [r for r in records if r.status == "ok"]
    tasks = sorted({r.task.split("@")[0] for r in ok})
    card = [
        "# axon-costmodel-trn1",
        "",
        "XGBoost model of normalized throughput (best latency in a task / latency) of Axon kernels on the",
        "trn1 timing simulator, from features of the lowered TileProgram (`axon/search/features.py`).",
        "",
        f"- training records: {len(ok)} measured kernels "
        f"({len(records) - len(ok)} failed or infeasible left out), {len(tasks)} tasks",
        f"- sampler for the training data: random, {args.trials} trials per task; "
        "backend: sim; hardware: configs/hw/trn1.yaml",
        f"- held-out (20% by kernel hash): pairwise ranking accuracy {acc.pairwise:.3f}, "
        f"peak@1 {acc.peak1:.3f}, peak@5 {acc.peak5:.3f}"
        if acc
        else "- held-out accuracy: not enough records",
        f"- XGBoost {model.params['max_depth']} deep, {model.rounds} rounds, eta {model.params['eta']}, seed 0",
        "",
        "Tasks:",
        "",
        *[f"- `{t}`" for t in tasks],
        "",
        "Use: `axon tune WORKLOAD --cost-model models/axon-costmodel-trn1.json` "
        "(warm start: training continues on the new",
        "task's measurements). Regenerate: `python experiments/train_shipped_model.py`.",
        "",
    ]
    (MODELS / "README.md").write_text("\n".join(card))
    print(
        f"records={len(ok)} tasks={len(tasks)} heldout_pairwise={acc.pairwise:.3f} "
        f"heldout_peak1={acc.peak1:.3f} heldout_peak5={acc.peak5:.3f}"
    )


if __name__ == "__main__":
    main()
