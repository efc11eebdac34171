"""`load_yaml(text)`: the YAML of the configuration files users write (hardware files, sweeps).

PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent: `hbm_bytes: 16e9` or
`regression_threshold: 1e-2` came back as the strings '16e9' and '1e-2', refused as "must be a
number". YAML 1.2, what users expect, reads them as numbers; this loader adds that one rule to
PyYAML's safe loader and changes nothing else.

>>> load_yaml("a: 16e9\\nb: 1e-2\\nc: 1.5\\nd: 7\\ne: 1e9x")
{'a': 16000000000.0, 'b': 0.01, 'c': 1.5, 'd': 7, 'e': '1e9x'}
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """The safe loader, with YAML 1.2's exponent floats (no dot needed, exponent sign optional)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


def load_yaml(text: str | bytes) -> Any:
    """Parse `text` as PyYAML's `safe_load` does, exponent floats as YAML 1.2 reads them."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
