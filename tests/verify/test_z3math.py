"""Z3Math: the ops of axon.ir.ops over Z3 terms, with only facts true over the reals."""

import z3

from axon.ir.ops import BINARY, UNARY
from axon.verify import Z3Math


def _holds(m: Z3Math, claim: z3.BoolRef) -> bool:
    s = z3.Solver()
    s.set("timeout", 5000)
    s.add(m.facts())
    s.add(z3.Not(claim))
    return s.check() == z3.unsat


def test_exp_is_positive_and_splits_over_addition():
    m, a, b = Z3Math(), z3.Real("a"), z3.Real("b")
    e = m.exp(a + b)
    assert _holds(m, e == m.exp(a) * m.exp(b))
    assert _holds(m, UNARY["exp"](m, a) > 0)


def test_rsqrt_squared_times_x_is_one_only_for_positive_x():
    m, x = Z3Math(), z3.Real("x")
    r = UNARY["rsqrt"](m, x)
    assert _holds(m, z3.Implies(x > 0, r * r * x == 1))
    assert not _holds(m, r * r * x == 1)  # nothing is claimed for x <= 0


def test_sigmoid_is_strictly_between_zero_and_one():
    m, x = Z3Math(), z3.Real("x")
    s = UNARY["sigmoid"](m, x)
    assert _holds(m, z3.And(s > 0, s < 1))


def test_maximum_and_relu_are_piecewise():
    m, a, b = Z3Math(), z3.Real("a"), z3.Real("b")
    assert _holds(m, BINARY["maximum"](m, a, b) >= a)
    assert _holds(m, UNARY["relu"](m, a) >= 0)


def test_tanh_has_no_unstated_identity():
    m, x = Z3Math(), z3.Real("x")
    claim = m.tanh(2 * x) == 2 * m.tanh(x) / (1 + m.tanh(x) * m.tanh(x))
    assert not _holds(m, claim)  # true over R, but not a fact we state: must not be "proved"
