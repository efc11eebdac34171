"""The public corpora of NKI kernels (../shared/data, present in CI) run unmodified and match their
reference. The whole corpus takes minutes (attention at 4096, the trn1 kernels at full shape): the
suite runs a fast representative subset, one kernel per failure class the emulator had;
`experiments/conformance.py` runs all of them and writes experiments/results/conformance.md."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"

# One per class of real-world NKI: SPMD host callers (spmd_dim, nl.nc), several arange terms in one
# axis, masked partial tiles (250 rows) read unmasked, a [P] -> [P, F] broadcast, PSUM
# accumulation and block tensors, the compiler-style trn1 kernels (with their partial last tile).
SUBSET = [
    "spmd_multiple_nc_tensor_add",
    "transpose2d",
    "average_pool2d",
    "rmsnorm",
    "softmax",
    "matmul_basic",
    "mamba_v2",
    "attention_v2",
    "rope_single_freq_apply_B1_H64_N4096_D128",
    "silu_M4096_N7168",
]


@pytest.fixture(scope="module")
def conformance():
    if not DATA.is_dir():
        pytest.skip(f"corpus folder {DATA} not present (the shared NKI corpora are in CI)")
    sys.path.insert(0, str(REPO / "experiments"))
    try:
        import conformance as c  # imports corpus too (the fixture below)
    finally:
        sys.path.remove(str(REPO / "experiments"))
    yield c


@pytest.fixture(scope="module")
def corpus(conformance):
    """experiments/corpus.py: the loader and running code conformance.py shares with the other experiments."""
    return sys.modules["corpus"]


@pytest.mark.slow
@pytest.mark.parametrize("name", SUBSET)
def test_corpus_kernel_matches_its_reference(conformance, corpus, name):
    cases = {c.name: c for c in conformance.all_cases(DATA, [conformance.TUTORIALS, conformance.NKIBENCH])}
    row = conformance.run_case(cases[name], DATA, simulate=False)
    assert row["ok"], row["error"]
    assert row["rel_err"] <= corpus.tolerance(cases[name])


def test_every_corpus_kernel_has_a_case(conformance):
    """Every kernel function of both corpora is run by the experiment (none silently skipped)."""
    import ast

    cases = conformance.all_cases(DATA, [conformance.TUTORIALS, conformance.NKIBENCH])
    covered = {(c.corpus, c.file, c.fn) for c in cases}
    for path in sorted((DATA / conformance.TUTORIALS).rglob("*.py")):
        if "nki_kernel" not in path.name and path.name != "attention_kernels.py":
            continue
        tree = ast.parse(path.read_text())
        rel = str(path.relative_to(DATA / conformance.TUTORIALS))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(
                "jit" in ast.unparse(d) or "baremetal" in ast.unparse(d) for d in node.decorator_list
            ):
                # a jitted kernel is run directly or through its host caller in the same file
                callers = [c for c in covered if c[1] == rel]
                assert callers, f"{rel}:{node.name} has no conformance case"
    assert len([c for c in cases if c.corpus == conformance.NKIBENCH]) == 7
