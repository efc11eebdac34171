"""Parsing of the values users type on the command line (shared by every command, below all layers).

>>> parse_shape_option("M=4096,K=1024")
{'M': 4096, 'K': 1024}
"""

from __future__ import annotations

from axon.errors import SpecError


def parse_shape_option(text: str | None) -> dict[str, int]:
    """`M=4096,K=1024` -> {"M": 4096, "K": 1024}; SpecError on anything else."""
    if not text:
        return {}
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
            raise SpecError(f"malformed --shape {text!r}: expected NAME=POSITIVE_INT[,NAME=...], e.g. M=4096,K=1024")
        out[name.strip()] = int(value)
    return out
