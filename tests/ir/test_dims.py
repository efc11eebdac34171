"""Symbolic dimensions: parsing, arithmetic, evaluation."""

import pytest

from axon.errors import SpecError
from axon.ir import Dim, parse_dim, parse_shape


def test_parse_and_normalize():
    assert parse_dim("KV*G") == parse_dim("G * KV")
    assert parse_dim("D/2") + parse_dim("D/2") == parse_dim("D")
    assert parse_dim("2*N - N") == Dim.sym("N")
    assert parse_shape("M, K") == (Dim.sym("M"), Dim.sym("K"))
    assert parse_shape("") == ()


def test_evaluate_and_division():
    d = parse_dim("KV*G")
    assert d.evaluate({"KV": 8, "G": 2}) == 16
    assert d / Dim.sym("KV") == Dim.sym("G")
    assert str(parse_dim("D/2")) == "D/2"
    with pytest.raises(SpecError, match="unbound dimension 'G'"):
        d.evaluate({"KV": 8})
    with pytest.raises(SpecError, match="not a whole number"):
        parse_dim("D/2").evaluate({"D": 3})


def test_bad_dimensions():
    with pytest.raises(SpecError, match="cannot parse"):
        parse_dim("M +")
    with pytest.raises(SpecError, match="only names"):
        parse_dim("M ** 2")
    with pytest.raises(SpecError, match="single term"):
        parse_dim("M") / parse_dim("M + N")
