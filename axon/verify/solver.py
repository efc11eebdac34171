"""Z3 solvers that leave Ctrl-C to Python.

By default Z3 takes SIGINT for itself while it checks: the check returns `unknown` ("interrupted
from keyboard") and Python never sees the KeyboardInterrupt, so a Ctrl-C during a proof dropped that
proof (a variant or an instruction sequence not offered) and the command went on to its end, exit 0.
With `ctrl_c` off, Python's handler takes the signal and raises once the check returns (within its
timeout). This module does not choose timeouts or limits: its callers do.
"""

from __future__ import annotations

import z3


def new_solver(ctx: z3.Context | None = None) -> z3.Solver:
    """A `z3.Solver` (in `ctx`, else the main context) whose checks do not catch Ctrl-C."""
    solver = z3.Solver(ctx=ctx)
    solver.set("ctrl_c", False)
    return solver
