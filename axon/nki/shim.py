"""`install_import_shim()`: make `import nki...` and `import neuronxcc.nki...` load the emulator.

This deliberately edits `sys.modules` (it is the one way to let an unmodified kernel file's imports
resolve here); it is an explicit call, never a side effect of importing `axon.nki`.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from axon.nki import compiler, current_isa, language, legacy_isa
from axon.nki import typing as nki_typing


def _package(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name, f"Axon NKI emulator shim for {name}")
    mod.__path__ = []  # a package, so submodule imports are looked up in sys.modules
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


def install_import_shim(jit: Callable[..., Any], simulate_kernel: Callable[..., Any]) -> None:
    """Register the emulator as `nki`, `nki.language`, `nki.isa`, `neuronxcc.nki(.language|.isa|.typing)`.

    `jit` and `simulate_kernel` are the runner's (`axon.nki.install_import_shim()` passes them).

    >>> from axon.nki import install_import_shim
    >>> install_import_shim()
    >>> import nki.language as nl
    >>> nl.tile_size.pmax
    128
    """
    # `trace` is the decorator compiler-emitted kernels import with `from neuronxcc.nki import trace`.
    common = dict(
        jit=jit,
        baremetal=jit,
        benchmark=jit,
        trace=jit,
        profile=jit,
        simulate_kernel=simulate_kernel,
        language=language,
        typing=nki_typing,
        compiler=compiler,
    )
    current = _package("nki", isa=current_isa, **common)
    legacy = _package("neuronxcc.nki", isa=legacy_isa, **common)
    neuronxcc = _package("neuronxcc", nki=legacy)
    sys.modules.update(
        {
            "nki": current,
            "nki.language": language,
            "nki.isa": current_isa,
            "nki.typing": nki_typing,
            "nki.compiler": compiler,
            "neuronxcc.nki.compiler": compiler,
            "neuronxcc": neuronxcc,
            "neuronxcc.nki": legacy,
            "neuronxcc.nki.language": language,
            "neuronxcc.nki.isa": legacy_isa,
            "neuronxcc.nki.typing": nki_typing,
        }
    )
