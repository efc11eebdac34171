"""The line each instruction records is its call's line in the kernel source, in a long generated
kernel (where `kernel_site` keeps the line of each call site) as in a loop that reaches one call site
many times, and on a second trace of the same kernel."""

from __future__ import annotations

import axon.nki
from axon.measure.backend import write_kernel

HEADER = """import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def long_kernel(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:128, 0:512], src=a[0:128, 0:512])
"""


def _source(n: int) -> str:
    body = []
    for i in range(n):
        body.append(
            f"    nisa.tensor_scalar(dst=t[0:128, {i % 8}:{i % 8 + 1}], data=t[0:128, 0:1], op0=nl.add, operand0={i}.0)"
        )
        if i % 5 == 0:
            body.append("    # a comment line between calls")
    loop = [
        "    for i in nl.affine_range(4):",
        "        nisa.tensor_copy(dst=t[0:128, i:i + 1], src=t[0:128, 8:9])",
        "        nisa.tensor_copy(dst=t[0:128, 9:10], src=t[0:128, i:i + 1])",
    ]
    tail = ["    nisa.dma_copy(dst=out[0:128, 0:512], src=t[0:128, 0:512])", "    return out", ""]
    return HEADER + "\n".join(body + loop + tail)


def test_each_instruction_records_its_calls_line(tmp_path):
    source = _source(600)
    lines = source.splitlines()
    fn = axon.nki.load_kernel(f"{write_kernel(source, tmp_path)}:long_kernel")
    first = axon.nki.trace(fn, ((128, 512), "float32"))
    again = axon.nki.trace(fn, ((128, 512), "float32"))
    expected = [i + 1 for i, s in enumerate(lines) if s.strip().startswith("nisa.")]
    loop_first = next(i for i, s in enumerate(lines) if "nl.affine_range" in s) + 2
    # the loop's two calls come 4 times, in order
    expected = expected[:601] + [loop_first, loop_first + 1] * 4 + expected[-1:]
    assert [ins.line for ins in first.instructions] == expected
    assert [ins.line for ins in again.instructions] == expected
    for ins in first.instructions:
        assert lines[ins.line - 1].strip().startswith("nisa."), ins
