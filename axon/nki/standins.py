"""`framework_stand_ins()`: load a kernel file that imports a framework which is not installed here.

AWS's tutorial files import torch, torch_xla, torch_neuronx, jax, transformers or loguru at the top
for their host code (devices, benchmarks, a reference implementation) that the kernels never call:
`softmax_nki_kernels.py` failed in `axon nki run` with "No module named 'torch_xla'". While the
file is executed, such an import that finds no installed module gets a stand-in: any attribute is
another stand-in (`torch_xla.core.xla_model`, `torch.tensor` in an annotation), and calling one
raises `ModuleNotFoundError` naming the framework, so host code that really runs (at import, or inside a
kernel) says what is missing instead of computing with a fake. Installed frameworks are imported as
usual, and the stand-ins leave `sys.modules` when the file is loaded (libraries that look for
`sys.modules["torch"]` must not find one).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

FRAMEWORKS = frozenset({"torch", "torch_xla", "torch_neuronx", "jax", "jaxlib", "transformers", "loguru"})


class StandIn(types.ModuleType):
    """A framework module that is not installed: attributes are stand-ins, a call is an error."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        top = self.__name__.partition(".")[0]
        raise ModuleNotFoundError(
            f"{self.__name__}(...) was called, but {top} is not installed here: the emulator loads a kernel "
            f"file that imports {top} for its host code without it, and runs only its NKI kernels",
            name=top,
        )

    def __getitem__(self, key: Any) -> Any:  # Tuple[torch.tensor, ...] in an annotation
        return self


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.made: list[str] = []

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if name.partition(".")[0] not in FRAMEWORKS or _installed(name):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        self.made.append(spec.name)
        module = StandIn(spec.name)
        module.__path__ = []  # a package: `import torch_xla.core.xla_model` finds its submodules here
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _installed(name: str) -> bool:
    top = name.partition(".")[0]
    if top in sys.modules and not isinstance(sys.modules[top], StandIn):
        return True
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is not None and find(top, None) is not None:
            return True
    return False


@contextmanager
def framework_stand_ins() -> Iterator[None]:
    """Stand-ins for the frameworks that are not installed, for the imports made inside the block."""
    finder = _Finder()
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in finder.made:
            if isinstance(sys.modules.get(name), StandIn):
                del sys.modules[name]
