"""Every discovered variant's default point, lowered, emitted and run in the NKI emulator against the
float64 reference (the `small` preset, float32, trn1).

The unit suite checks one variant per set of moves (tests/lower/test_lowering.py); this checks all of
them, for a change to the lowering or the emulator that might break a rewrite at one place only.
Last line: `variants=N ok=N failed=F`.

Usage: .venv/bin/python experiments/variant_numerics.py [--only WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import os
import sys

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import axon.nki  # noqa: E402
from axon.ir import max_rel_error, reference_case  # noqa: E402
from axon.lower import lower  # noqa: E402
from axon.lower.emit import emit  # noqa: E402
from axon.lower.space import Space  # noqa: E402
from axon.synth import discover_variants  # noqa: E402
from axon.target import load_hw  # noqa: E402
from axon.workloads import get, names  # noqa: E402

TOL = 1e-5  # float32, as the unit tests


def check(variant, hw) -> str | None:
    """None when the emitted kernel of the variant's default point matches the reference, else why."""
    prog = lower(variant, Space(variant, hw, isel={}).default_point(), hw)
    x, ref = reference_case(variant.graph)
    res = axon.nki.run(emit(prog), *[x[t.name] for t in prog.inputs], hw=hw)
    res = res if isinstance(res, (tuple, list)) else (res,)
    got = {name: np.asarray(r, dtype=np.float64) for name, r in zip(prog.output_names, res)}
    err = max_rel_error(got, ref)
    return None if err <= TOL else f"max rel err {err:.2e} > {TOL:g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="workloads to check (default: all)")
    args = ap.parse_args()
    hw = load_hw("trn1")
    total = ok = 0
    for name in args.only or names():
        variants = discover_variants(get(name).graph("small", dtype="float32"), max_depth=4)
        bad = []
        for i, v in enumerate(variants):
            total += 1
            try:
                why = check(v, hw)
            except Exception as exc:  # a crash is a failure to report, not a reason to stop
                why = f"{type(exc).__name__}: {exc}"
            if why is None:
                ok += 1
            else:
                bad.append(f"  variant {i} ({' + '.join(m.name for m in v.moves) or 'as written'}): {why}")
        print(f"{name}: {len(variants) - len(bad)}/{len(variants)}", *bad, sep="\n", flush=True)
    print(f"variants={total} ok={ok} failed={total - ok}")
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
