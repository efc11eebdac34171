"""Collection for `pytest` at the repository root: tests/ and the doctests of axon/.

The kernel files (axon/lower/expert/*.py, tests/*/kernels/*.py) are NKI source that imports `nki`,
which exists only inside the emulator's loader: they are loaded by the tests, not collected;
`python -m axon.cli` runs the command when imported.
"""

collect_ignore_glob = ["axon/lower/expert/[!_]*.py", "axon/cli/__main__.py", "tests/*/kernels/*.py"]


def pytest_collection_modifyitems(config, items):
    """The tests marked slow run first, in their usual order, and the quick ones after them: with
    `-n 2 --dist worksteal` (the Makefile's) a long test started near the end would keep one worker
    busy while the other sits idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
