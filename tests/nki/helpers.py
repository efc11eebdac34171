"""Helpers of the emulator tests: kernels by file and name, the line a rule kernel marks."""

from pathlib import Path

import axon.nki

KERNELS = Path(__file__).parent / "kernels"


def kernel(module: str, name: str):
    return axon.nki.load_kernel(f"{KERNELS / module}.py:{name}")


def rule_line(name: str) -> int:
    """The line of kernels/rules.py marked `# RULE` inside function `name`."""
    lines = (KERNELS / "rules.py").read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith(f"def {name}("))
    return next(i + 1 for i in range(start, len(lines)) if "# RULE" in lines[i])
