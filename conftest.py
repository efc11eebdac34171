"""Collection for `pytest` at the repository root: tests/ and the doctests of axon/.

The kernel files (axon/lower/expert/*.py, tests/*/kernels/*.py) are NKI source that imports `nki`,
which exists only inside the emulator's loader: they are loaded by the tests, not collected;
`python -m axon.cli` runs the command when imported.
"""

collect_ignore_glob = ["axon/lower/expert/[!_]*.py", "axon/cli/__main__.py", "tests/*/kernels/*.py"]


def pytest_collection_modifyitems(config, items):
    """The tests marked slow run first, shared out between the test workers, and the quick ones after
    them. With `-n N --dist worksteal` (the Makefile's) worker i is first handed the i-th of N
    contiguous slices of the collection and, once its own are done, steals from the end of another's:
    so each slice starts with every N-th slow test (in their usual order) and is filled up with quick
    ones. A long test started near the end would keep one worker busy while the other sits idle, and
    with all the slow tests in the first slice (as when they were only sorted first) the last tests
    the two workers shared out were slow ones."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    quick = [item for item in items if item.get_closest_marker("slow") is None]
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    ordered, left = [], len(items)
    for i in range(workers):
        size = left // (workers - i)  # the slice worksteal hands worker i: what is left over the workers left
        share = slow[i::workers]
        fill = max(0, size - len(share))
        ordered += share + quick[:fill]
        quick = quick[fill:]
        left -= size
    items[:] = ordered + quick
