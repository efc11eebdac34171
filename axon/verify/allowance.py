"""How much less accurate than the spec as written a variant or a kernel may be on an input class:
one rule for the variant screen (`axon.verify.adversarial`) and the kernel check
(`axon.search.checks`).
"""

from __future__ import annotations

import math

# A variant may be up to this factor less accurate than the spec as written on a class. Moving a
# handful of operations adds a few roundings per element (each at most one unit in the last place),
# which changes a worst error by a small factor; what this check exists for grows with the input
# (0.078 against 1e-7 for a dropped max shift, 0.475 against 8.4e-5 for a one-pass variance), orders
# of magnitude apart. A variant within the kernel tolerance passes whatever the spec achieves.
ACCURACY_FACTOR = 10.0


def allowed_error(spec_error: float, error: float, tol: float) -> float:
    """The error a variant or kernel may have on a class where the spec as written has `spec_error`.
    Where that is inf or NaN, a finite one is held to ACCURACY_FACTOR x `tol`: 10 x inf let a naive
    sigmoid's exp(x - log(1 + exp(x))) through, 0 past x = 88.7 where the answer is 1."""
    finite_where_spec_is_not = not math.isfinite(spec_error) and math.isfinite(error)
    return ACCURACY_FACTOR * tol if finite_where_spec_is_not else max(tol, ACCURACY_FACTOR * spec_error)
