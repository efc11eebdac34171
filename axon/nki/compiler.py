"""`nki.compiler` / `neuronxcc.nki.compiler`: direct allocation and compiler directives.

`nki.compiler.sbuf.mod_alloc(base_addr=, num_free_tiles=)` and `nki.compiler.psum.mod_alloc(
base_bank=, num_bank_tiles=)` place a tensor by hand; `Machine.allocate` charges exactly the
footprint they name and checks it against the memory. Directives that steer the compiler's own
passes (`skip_middle_end_transformations`, `no_reorder`) change no numbers and are accepted as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from axon.nki import dtypes
from axon.nki.dtypes import Buffer


@dataclass(frozen=True)
class DirectBuffer(Buffer):
    """A buffer placed by hand: SBUF byte offset (`base_addr`) or first PSUM bank (`base_bank`) and
    the number of physical tiles block index i rotates through (i mod n, per block axis)."""

    base: int = 0
    tiles: tuple[int, ...] = ()
    by_bank: bool = False


class _Allocators:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def mod_alloc(
        self,
        base_addr: int = 0,
        base_partition: int = 0,
        num_par_tiles: Any = (),
        num_free_tiles: Any = (),
        base_bank: int | None = None,
        num_bank_tiles: Any = (),
        **_: Any,
    ) -> DirectBuffer:
        if self.kind == "psum":
            return DirectBuffer("psum", "psum", int(base_bank or 0), tuple(int(t) for t in num_bank_tiles), True)
        return DirectBuffer("sbuf", "sbuf", int(base_addr), tuple(int(t) for t in num_free_tiles), False)

    def alloc(self, *args: Any, **kwargs: Any) -> DirectBuffer:
        return self.mod_alloc(*args, **kwargs)

    def auto_alloc(self) -> Buffer:

        return dtypes.psum if self.kind == "psum" else dtypes.sbuf


sbuf = _Allocators("sbuf")
psum = _Allocators("psum")


def skip_middle_end_transformations(fn: Any) -> Any:
    return fn


def enable_stack_allocator(*args: Any, **kwargs: Any) -> Any:
    return args[0] if args and callable(args[0]) else (lambda f: f)


def no_reorder(*_: Any, **__: Any) -> str:
    return "no_reorder"


def tile_position(*_: Any, **__: Any) -> None:
    return None
