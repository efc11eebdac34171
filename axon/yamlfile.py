"""`load_yaml(text)`: the YAML of the configuration files users write (hardware files, sweeps).

PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent: `hbm_bytes: 16e9` or
`regression_threshold: 1e-2` came back as the strings '16e9' and '1e-2', refused as "must be a
number". YAML 1.2, what users expect, reads them as numbers; this loader adds that one rule to
PyYAML's safe loader, refuses a key given twice in one mapping, and changes nothing else.

>>> try:
...     load_yaml("a: 1\\nb: 2\\na: 3")
... except DuplicateKey as exc:
...     print(exc.problem)
key 'a' given twice (again at line 3)
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that names a key twice (a YAMLError, with the line of the second)."""


class _Loader(yaml.SafeLoader):
    """The safe loader, with YAML 1.2's exponent floats (no dot needed, exponent sign optional), and
    a key given twice in one mapping refused: PyYAML kept the last value, so a second `entries:`
    appended to a sweep config dropped the first list without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                line = key_node.start_mark.line + 1
                raise DuplicateKey(None, None, f"key {key!r} given twice (again at line {line})", key_node.start_mark)
            seen.add(key if isinstance(key, (str, int, float, bool)) else id(key_node))
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


def load_yaml(text: str | bytes) -> Any:
    """Parse `text` as PyYAML's `safe_load` does, exponent floats as YAML 1.2 reads them."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
