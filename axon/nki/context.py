"""Which `Machine` the running kernel's `nl.*` and `nisa.*` calls belong to (the emulator's one
piece of process state, per thread), and the kernel line being executed. Below every other emulator
module, so views, instructions and the machine all find the running kernel here.
"""

from __future__ import annotations

import contextvars
import os
import sys
from types import CodeType, FrameType
from typing import TYPE_CHECKING

from axon.errors import NKIError

if TYPE_CHECKING:  # the class is only named in annotations here
    from axon.nki.machine import Machine

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The one piece of process state: which Machine the nl/nisa calls of this thread belong to.
_ACTIVE: contextvars.ContextVar[Machine | None] = contextvars.ContextVar("axon_nki_machine", default=None)


class AutoEngine(str):
    """An engine the emulator chose because the kernel did not (`Machine.issue` records the choice
    as `axon.target.trace.AUTO_ENGINE`, so the timing simulator may balance it like the compiler)."""


class nc_version:
    """`nki.isa.nc_version`: the NeuronCore generation (gen2 trn1/inf2, gen3 trn2, gen4 trn3)."""

    gen2, gen3, gen4 = "gen2", "gen3", "gen4"


def get_nc_version() -> str:
    """`nki.isa.get_nc_version()`: the generation of the hardware the kernel runs on."""
    name = active().hw.name
    return {"trn1": nc_version.gen2, "inf2": nc_version.gen2, "trn2": nc_version.gen3, "trn3": nc_version.gen4}.get(
        name, nc_version.gen2
    )


def active() -> Machine:
    m = _ACTIVE.get()
    if m is None:
        raise NKIError("NKI calls must run inside a kernel: use axon.nki.run(kernel, ...) or axon.nki.trace(...)")
    return m


def maybe_active() -> Machine | None:
    return _ACTIVE.get()


def kernel_site() -> tuple[str, int]:
    """(file, line) of the innermost frame outside the emulator: the kernel line being executed."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back
    if f is None:  # pragma: no cover - only when called from emulator-internal code
        return ("<emulator>", 0)
    code = f.f_code
    if f.f_trace is not None:  # a debugger's frame: its line is what the tracer says
        return (code.co_filename, f.f_lineno)
    # `f_lineno` scans the code's line table from its start, and a generated kernel is one long
    # function (thousands of lines unrolled): the line of each call site, once. Keyed by the code's
    # id, since hashing a code object hashes all its constants; the entry holds the code, so the id
    # stays its own while the entry lives.
    key = (id(code), f.f_lasti)
    known = _LINES.get(key)
    if known is not None and known[0] is code:
        return (code.co_filename, known[1])
    if len(_LINES) >= _LINES_MAX:
        _LINES.clear()
    line = f.f_lineno
    _LINES[key] = (code, line)
    return (code.co_filename, line)


# (id of code, bytecode offset) -> (code, source line) of kernel call sites: a cache, not state (a
# pure function of its key), bounded
_LINES: dict[tuple[int, int], tuple[CodeType, int]] = {}
_LINES_MAX = 1 << 16
