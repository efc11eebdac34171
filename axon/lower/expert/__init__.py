"""Hand-written NKI kernels (current `nki` API) used as the `expert` baseline.

Written for Axon from the algorithms in the manner of the public NKI tutorials (row tiles of 128
partitions, fused activation/reduction instructions, PSUM accumulation, scale applied while PSUM is
evacuated), not copied from them. `source(name)` gives a kernel's text and `path(name)` its file.
"""

from __future__ import annotations

from pathlib import Path

from axon.errors import SpecError

HERE = Path(__file__).resolve().parent
KERNELS = ("rmsnorm", "layernorm", "softmax", "matmul", "rmsnorm_matmul", "attention")


def path(name: str) -> Path:
    if name not in KERNELS:
        raise SpecError(f"no expert kernel for {name!r}; expert kernels exist for {', '.join(KERNELS)}")
    return HERE / f"{name}.py"


def source(name: str) -> str:
    """The kernel file's text.

    >>> "@nki.jit" in source("softmax")
    True
    """
    return path(name).read_text()
