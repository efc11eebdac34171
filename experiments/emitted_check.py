"""Emitted-kernel check: does the current code emit the same kernel for every point the results
table measured?

`--record` writes experiments/results/emitted.json from the results table's record databases
(<work>/tuning/<hw>/seed<k>/records.db, `--work` default experiments/results/work, the table's
`--out`/work when it ran elsewhere): one entry per measured kernel (workload, hardware,
variant hash, point, hash of the emitted source). `--record --sample K` writes it without a tuning:
K valid points drawn (seeded) per built-in workload and hardware from the whole space, and K/4
from the op-by-op space, at the default shapes, each with the hash the current code emits. Without
`--record`, every entry is lowered again by the current code and its source hash compared. A
refactor that claims "no kernel changed" runs this; the last line is
`points=N same=N changed=K failed=F`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)
import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

from axon.errors import AxonError  # noqa: E402
from axon.search.problem import LoweredProblem  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import get, names  # noqa: E402

RESULTS = Path(__file__).parent / "results"
MANIFEST = RESULTS / "emitted.json"


def record_manifest(work: Path) -> int:
    from axon.measure.records import RecordDB

    entries, seen = [], set()
    for db_path in sorted((work / "tuning").rglob("records.db")):  # every hardware and seed
        for r in RecordDB(db_path).records():
            key = (r.hw, r.workload, r.kernel_hash, json.dumps(r.point, sort_keys=True))
            if r.status != "ok" or key in seen:
                continue
            seen.add(key)
            entries.append(
                {
                    "hw": r.hw,
                    "workload": r.workload,
                    "shapes": r.shapes,
                    "dtype": r.dtype,
                    "variant_hash": r.variant_hash,
                    "point": r.point,
                    "kernel_hash": r.kernel_hash,
                }
            )
    MANIFEST.write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n")
    return len(entries)


class _AsWritten:
    """The graph as written, the one 'variant' of the op-by-op rows."""

    def __init__(self, graph):
        self.graph, self.hash, self.moves, self.proofs = graph, graph.canonical_hash(), (), ()


def sample_manifest(k: int, hws: tuple[str, ...] = ("trn1", "trn2")) -> int:
    entries = []
    for hw in hws:
        for workload in names():
            for problem, tag, count in zip(_problems(workload, hw), ("", "#unfused_tuned"), (k, max(1, k // 4))):
                rng, seen, tries = np.random.default_rng(0), set(), 0
                while len(seen) < count and tries < 20 * count:
                    tries += 1
                    point = problem.sample(rng)
                    key = json.dumps(point, sort_keys=True)
                    if key in seen or problem.validate(point) is not None:
                        continue
                    try:
                        cand = problem.build(point)
                    except AxonError:
                        continue
                    seen.add(key)
                    entries.append(
                        {"hw": hw, "workload": workload + tag, "point": point, "kernel_hash": cand.kernel_hash}
                    )
            print(f"{workload} {hw}: sampled", file=sys.stderr)
    MANIFEST.write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n")
    return len(entries)


def _problems(workload: str, hw_name: str):
    from axon.search.api import verified_variants

    graph = get(workload).graph("default")
    hw = load_hw(hw_name)
    full = LoweredProblem(workload, graph, hw, verified_variants(graph), "float32")
    original = LoweredProblem(workload, graph, hw, [_AsWritten(graph)], "float32")
    return full, original


def check(limit: int | None) -> tuple[int, int, list[str], list[str]]:
    entries = json.loads(MANIFEST.read_text())
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for e in entries:
        groups[(e["workload"].split("#")[0], e["hw"])].append(e)
    same, changed, failed, n = 0, [], [], 0
    for (workload, hw), group in sorted(groups.items()):
        full, original = _problems(workload, hw)
        for e in group[:limit]:
            n += 1
            problem = original if e["workload"].endswith("#unfused_tuned") else full
            try:
                got = problem.build(e["point"]).kernel_hash
            except AxonError as exc:
                failed.append(f"{hw} {e['workload']} {e['point']}: {exc}")
                continue
            if got == e["kernel_hash"]:
                same += 1
            else:
                changed.append(f"{hw} {e['workload']} {e['point']}: {e['kernel_hash']} -> {got}")
        print(f"{workload} {hw}: {len(group[:limit])} points checked", file=sys.stderr)
    return n, same, changed, failed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true", help="write the manifest from the table's record databases")
    ap.add_argument("--work", type=Path, default=RESULTS / "work", help="the results table's work directory")
    ap.add_argument("--limit", type=int, default=None, help="check at most N points per workload and hardware")
    ap.add_argument("--sample", type=int, default=None, help="with --record: K sampled points per workload, no tuning")
    args = ap.parse_args()
    if args.record:
        print(f"recorded={record_manifest(args.work) if args.sample is None else sample_manifest(args.sample)}")
        return
    n, same, changed, failed = check(args.limit)
    for line in changed[:20] + failed[:20]:
        print(line)
    print(f"points={n} same={same} changed={len(changed)} failed={len(failed)}")
    sys.exit(0 if not changed and not failed else 1)


if __name__ == "__main__":
    main()
