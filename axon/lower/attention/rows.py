"""The rows of a head before the steps: an rmsnorm of the Q or K rows in place (`rms_rows`), and
their transposes on TensorE into the [width, rows] operands of the scores matmul (`transpose_all`,
the rmsnorm's gain applied per partition on the way out of PSUM). It loads nothing from HBM."""

from __future__ import annotations

from collections.abc import Callable

from axon.lower.attention.instr import bank, on, ref2
from axon.lower.program import Comment, Ref, Stmt

# allocates an SBUF tile: (name, shape, dtype) -> name
Alloc = Callable[[str, tuple[int, ...], str], str]


def rms_rows(tile: Alloc, P: int, rows: str, tiles: int, width: int, eps: float, what: str) -> list[Stmt]:
    """Each row of the [P, tiles*width] row tiles times 1/sqrt(mean(x^2) + eps), in place (the
    gain is applied per partition once transposed)."""
    ss = tile(f"{what.lower()}_sumsq", (P, tiles), "float32")
    junk = tile(f"{what.lower()}_sq", (P, width), "float32")
    out: list[Stmt] = [Comment(f"rmsnorm of the {what} rows: sum of squares and scale per row")]
    for t in range(tiles):
        out.append(
            on(
                "activation",
                "scalar",
                ref2(junk, 0, P, 0, width),
                (
                    ("op", "nl.square"),
                    ("data", ref2(rows, 0, P, t * width, width)),
                    ("reduce_op", "nl.add"),
                    ("reduce_res", ref2(ss, 0, P, t, 1)),
                ),
            )
        )
    out.append(
        on(
            "tensor_scalar",
            "vector",
            ref2(ss, 0, P, 0, tiles),
            (
                ("data", ref2(ss, 0, P, 0, tiles)),
                ("op0", "nl.multiply"),
                ("operand0", 1.0 / width),
                ("op1", "nl.add"),
                ("operand1", eps),
            ),
        )
    )
    out.append(
        on("activation", "scalar", ref2(ss, 0, P, 0, tiles), (("op", "nl.rsqrt"), ("data", ref2(ss, 0, P, 0, tiles))))
    )
    for t in range(tiles):
        row = ref2(rows, 0, P, t * width, width)
        out.append(
            on(
                "tensor_scalar",
                "vector" if t % 2 == 0 else "gpsimd",
                row,
                (("data", row), ("op0", "nl.multiply"), ("operand0", ref2(ss, 0, P, t, 1))),
            )
        )
    return out


def transpose_all(P: int, src: str, dst: str, tiles: int, width: int, what: str, gain: Ref | None = None) -> list[Stmt]:
    """[P, tiles*width] row tiles -> [width, tiles*P]: four TensorE transposes per PSUM bank."""
    per = 512 // P
    out: list[Stmt] = [Comment(f"{what}.T on TensorE, {per} tiles per PSUM bank")]
    for g0 in range(0, tiles, per):
        n = min(per, tiles - g0)
        slot = (g0 // per) % 2
        for j in range(n):
            t = g0 + j
            out.append(
                on(
                    "nc_transpose",
                    "tensor",
                    bank("transpose_psum", slot, width, j * P, P),
                    (("data", ref2(src, 0, P, t * width, width)),),
                )
            )
        eng = "vector" if (g0 // per) % 2 == 0 else "scalar"
        psum = bank("transpose_psum", slot, width, 0, n * P)
        if gain is None:
            out.append(on("tensor_copy", eng, ref2(dst, 0, width, g0 * P, n * P), (("src", psum),)))
        else:  # the gain, one value per partition now, applied on the way out of PSUM
            out.append(
                on(
                    "tensor_scalar",
                    eng,
                    ref2(dst, 0, width, g0 * P, n * P),
                    (("data", psum), ("op0", "nl.multiply"), ("operand0", gain)),
                )
            )
    return out
