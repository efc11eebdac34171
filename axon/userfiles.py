"""`siblings_importable(folder)`: a user's file (a spec, a kernel) imports the files beside it, as a
script run from its folder would, and what it imported from there is forgotten afterwards.

Without the forgetting, the second of two files in different folders that each import their own
`helpers.py` gets the first one's module from `sys.modules`: a kernel computed with another file's
constants, silently.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def siblings_importable(folder: str) -> Iterator[None]:
    """`folder` first on `sys.path` in the block; the modules imported from it are dropped after."""
    folder = os.path.abspath(folder)
    before = set(sys.modules)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if os.path.abspath(file).startswith(folder + os.sep):
                del sys.modules[name]
