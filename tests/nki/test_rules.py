"""Each hardware rule is an NKIError naming the rule and the kernel line that broke it."""

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError
from tests.nki.helpers import kernel, rule_line

A = np.ones((128, 512), np.float32)

CASES = [
    ("partition_over_128", "partition axis > 128"),
    ("matmul_partition_mismatch", "matmul partition mismatch"),
    ("stationary_free_over_128", "stationary free size > 128"),
    ("moving_free_over_512", "moving free size > 512"),
    ("matmul_input_not_in_sbuf", "nc_matmul stationary must be in SBUF"),
    ("matmul_output_not_in_psum", "nc_matmul dst must be in PSUM"),
    ("psum_tile_over_bank", "PSUM tile larger than a bank"),
    ("sbuf_capacity", "SBUF capacity exceeded"),
    ("psum_capacity", "PSUM capacity exceeded"),
    ("gpsimd_touches_psum", "GpSimd cannot access PSUM"),
    ("read_never_written", "read of never-written memory"),
    ("read_partly_written", "read of never-written memory"),
]


@pytest.mark.parametrize("name,rule", CASES)
def test_rule_reports_rule_and_line(name, rule):
    with pytest.raises(NKIError) as err:
        axon.nki.run(kernel("rules", name), A)
    msg = str(err.value)
    assert rule in msg
    assert msg.startswith(f"rules.py:{rule_line(name)}: ")


@pytest.mark.parametrize("name,rule", [c for c in CASES if c[0] != "read_partly_written"])
def test_rules_hold_in_trace_mode(name, rule):
    with pytest.raises(NKIError) as err:
        axon.nki.trace(kernel("rules", name), ((128, 512), "float32"))
    assert rule in str(err.value) and f"rules.py:{rule_line(name)}:" in str(err.value)


def test_capacity_follows_the_hardware_file():
    f = kernel("rules", "sbuf_capacity")
    with pytest.raises(NKIError, match="SBUF capacity exceeded.*196608 of trn1"):
        axon.nki.run(f, A, hw="trn1")
    assert axon.nki.run(f, A, hw="trn2").shape == (128, 512)  # 224 KiB per partition fits both tiles


def test_a_loop_body_tile_dies_with_its_iteration():
    tr = axon.nki.trace(kernel("rules", "sbuf_capacity_loop_ok"), ((128, 512), "float32"))
    assert tr.meta["peak_sbuf_bytes_per_partition"] == 25600 * 4
    sites = {a.site for a in tr.allocs if a.buffer == "sbuf"}
    assert len([a for a in tr.allocs if a.buffer == "sbuf"]) == 4 and len(sites) == 1


def test_poisoned_memory_is_nan_not_zero_in_unread_outputs():
    def half(a):
        import nki.isa as nisa
        import nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out[:, :256], src=t[:, :256])
        return out

    out = axon.nki.run(half, A)
    assert np.all(out[:, :256] == 1) and np.all(np.isnan(out[:, 256:]))
