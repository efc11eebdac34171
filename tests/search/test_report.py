"""`TuneReport.summary()`: the lines `axon tune` prints."""

from __future__ import annotations

from axon.search.report import TuneReport


def _report(best_ns: float, roofline_ns: float) -> TuneReport:
    return TuneReport(
        "v", {"M": 4, "N": 64}, "float32", "trn1", "sim", "costmodel", 0, best_ns, {}, "", "k.py", (),
        None, None, roofline_ns, None, 3, 0, 0, 1.0, "s",
    )  # fmt: skip


def test_a_tiny_problems_roofline_is_not_printed_as_zero():
    """4x64 float32 (var of a row): the bound is 5 ns of HBM, printed as `0.0 us`, `achieved 0.0%`."""
    line = next(x for x in _report(18_500.0, 5.0).summary().splitlines() if "roofline" in x)
    assert "5 ns" in line and "0.027%" in line and "0.0 us" not in line


def test_a_usual_roofline_line_is_unchanged():
    line = next(x for x in _report(22_900.0, 2_560.0).summary().splitlines() if "roofline" in x)
    assert line == "  roofline         2.6 us  achieved  11.2% of the bound"
