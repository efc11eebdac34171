"""`neuronxcc.nki.typing`: annotation helpers (`nt.tensor[shape, dtype]`); types only, no checks."""

from __future__ import annotations

from typing import Any


class tensor:
    """`nt.tensor[(128, 512), nl.float32]` in a kernel signature: accepted, not enforced."""

    def __class_getitem__(cls, item: Any) -> Any:
        return cls


class mutable_tensor(tensor):
    pass


scalar = Any
