"""One allowance for the variant screen and the kernel check (`axon.verify.allowance`)."""

from __future__ import annotations

import math

from axon.verify.adversarial import ClassResult
from axon.verify.allowance import allowed_error

TOL = 1e-5
INF = math.inf


def test_where_the_spec_is_finite_ten_times_its_error_or_the_tolerance():
    assert allowed_error(1e-3, 5e-3, TOL) == 1e-2
    assert allowed_error(1e-9, 5e-3, TOL) == TOL


def test_where_the_spec_is_not_finite_a_finite_result_is_held_to_ten_times_the_tolerance():
    assert allowed_error(INF, 1.0, TOL) == 10 * TOL
    assert allowed_error(math.nan, 1.0, TOL) == 10 * TOL
    assert not ClassResult("offset", "x", INF, 1.0, TOL).ok  # 0 where the answer is 1
    assert ClassResult("offset", "x", INF, 5e-5, TOL).ok


def test_a_variant_that_overflows_where_the_spec_does_is_not_refused_for_it():
    """No worse than the spec as written there: the screen let it through before the finite rule and still does."""
    assert ClassResult("limit", "x", INF, INF, TOL).ok
