"""Collection for `pytest` at the repository root: tests/ and the doctests of axon/.

The kernel files (axon/lower/expert/*.py, tests/*/kernels/*.py) are NKI source that imports `nki`,
which exists only inside the emulator's loader: they are loaded by the tests, not collected;
`python -m axon.cli` runs the command when imported.
"""

collect_ignore_glob = ["axon/lower/expert/[!_]*.py", "axon/cli/__main__.py", "tests/*/kernels/*.py"]
