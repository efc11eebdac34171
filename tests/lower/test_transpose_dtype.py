"""Axon's bfloat16 kernels keep a TensorE transpose's dtype: nki.isa.nc_transpose (current API)
requires the PSUM dst to have the data's dtype. They transposed bf16 tiles into fp32 PSUM (10 of the
20 built-in workloads at their default points), a kernel the current compiler refuses."""

from __future__ import annotations

import pytest

import axon.nki
import axon.nki.current_isa as current_isa
import axon.nki.instructions as instructions
import axon.nki.isa_tensor as isa_tensor
from axon.measure.backend import write_kernel
from axon.search.problem import LoweredProblem
from axon.synth import discover_variants
from axon.target import load_hw
from axon.workloads import get


@pytest.mark.parametrize("name", ["matmul", "rmsnorm_matmul", "swiglu", "attention", "bmm_softmax", "lora"])
def test_tensor_engine_transposes_write_psum_in_the_data_dtype(name, tmp_path, monkeypatch):
    seen: list[tuple[str, str, str]] = []
    real = isa_tensor.nc_transpose

    def recording(dst, data, *args, **kwargs):
        out = real(dst, data, *args, **kwargs)
        seen.append((str(data.dtype), str(out.dtype), out.alloc.kind))
        return out

    for module in (isa_tensor, instructions, current_isa):
        monkeypatch.setattr(module, "nc_transpose", recording)
    g = get(name).graph("small", dtype="bfloat16")
    problem = LoweredProblem(name, g, load_hw("trn1"), discover_variants(g, max_depth=0), "bfloat16")
    point = problem.default_point(0)
    if "transpose" in point and problem.validate({**point, "transpose": "pe"}) is None:
        point = {**point, "transpose": "pe"}  # TensorE, not the DMA engine, transposes
    cand = problem.build(point)
    fn = axon.nki.load_kernel(f"{write_kernel(cand.source, tmp_path)}:{cand.kernel}")
    axon.nki.trace(fn, *[(g.concrete_shape(n.id), "bfloat16") for n in g.inputs], hw="trn1")
    into_psum = [s for s in seen if s[2] == "psum"]
    assert into_psum, "no TensorE transpose ran: the test checks nothing"
    assert all(data == dst for data, dst, _ in into_psum), sorted(set(into_psum))
