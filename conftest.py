"""Collection for `pytest` at the repository root: tests/ and the doctests of axon/.

The kernel files (axon/lower/expert/*.py, tests/*/kernels/*.py) are NKI source that imports `nki`,
which exists only inside the emulator's loader: they are loaded by the tests, not collected;
`python -m axon.cli` runs the command when imported.
"""

import pytest

from axon.gcpause import keep_frozen

collect_ignore_glob = ["axon/lower/expert/[!_]*.py", "axon/cli/__main__.py", "tests/*/kernels/*.py"]


def pytest_runtest_setup(item):
    """The collector tests (`axon.gcpause`'s doctests and tests/search/test_gcpause.py) check the
    collector as a tune finds it in a fresh process: nothing frozen (see `pytest_runtest_teardown`)."""
    if item.path.name in ("gcpause.py", "test_gcpause.py"):
        keep_frozen(False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test (its fixtures torn down): collect what it left, then freeze what survives
    (`gc.freeze`: no later collection walks it). A test worker keeps the caches of hundreds of tests
    (discovered variants, lowered programs, graph memos: over a million objects), and every full
    collection a later test's allocations trigger walked all of it: one such collection took 53 of
    the 55 s of tests/lower/test_attention_online.py::test_online_softmax_survives_large_offsets_and_a_dominant_score
    on a busy 2-core machine (0.4 s alone), 147 s of both workers' 1,384 s. Each collection here
    walks only the young generations: what the test made since the last collection while it ran. A
    full one also walked what the test kept long enough to age (its caches), to find the few cycles
    among it that died with the test: 9.1 CPU-s over the 1,035 tests of tests/lower, search, nki and
    synth, against 1.4 s, at the same peak memory per worker (2.0 GB). Nothing in Axon depends on
    when the collector runs (`axon.gcpause`); a cycle among frozen objects that dies later is not
    collected (freed at exit)."""
    yield
    keep_frozen(generation=1)  # gc.collect(1), gc.freeze(), and axon's gc_frozen told so


def pytest_collection_modifyitems(config, items):
    """The tests marked slow run first, shared out between the test workers, and the quick ones after
    them. With `-n N --dist worksteal` (the Makefile's) worker i is first handed the i-th of N
    contiguous slices of the collection and, once its own are done, steals from the end of another's:
    so each slice starts with every N-th slow test (in their usual order) and is filled up with quick
    ones. A long test started near the end would keep one worker busy while the other sits idle, and
    with all the slow tests in the first slice (as when they were only sorted first) the last tests
    the two workers shared out were slow ones."""
    collector = [item for item in items if item.path.name in ("gcpause.py", "test_gcpause.py")]
    rest = [item for item in items if item not in collector]
    slow = [item for item in rest if item.get_closest_marker("slow") is not None]
    quick = [item for item in rest if item.get_closest_marker("slow") is None]
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    ordered, left = [], len(rest)
    for i in range(workers):
        size = left // (workers - i)  # the slice worksteal hands worker i: what is left over the workers left
        share = slow[i::workers]
        fill = max(0, size - len(share))
        ordered += share + quick[:fill]
        quick = quick[fill:]
        left -= size
    # the collector tests first: each unfreezes the heap, and the collection after it walks whatever the
    # tests before it kept (11.7 CPU-s for one doctest after 700 tests, under 0.1 s first)
    items[:] = collector + ordered + quick
