"""`axon nki profile FILE.py:FN --input ... --hw ...` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

KERNEL = Path(__file__).parent / "kernels" / "small.py"


def test_profile_prints_the_summary_and_writes_the_timeline(axon_cli, tmp_path):
    r = axon_cli(
        "nki",
        "profile",
        f"{KERNEL}:exp_kernel",
        "--input",
        "a=bfloat16[128,512]",
        "--hw",
        "trn1",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert "latency" in r.stdout and "scalar" in r.stdout
    events = json.loads((tmp_path / "exp_kernel.perfetto.json").read_text())["traceEvents"]
    assert [e["name"] for e in events if e["ph"] == "X"] == ["dma_copy", "activation", "dma_copy"]
    assert (tmp_path / "exp_kernel.png").stat().st_size > 1000


@pytest.mark.parametrize("hw", ["trn1", "trn2"])
def test_profile_latency_depends_on_the_hardware_file(axon_cli, tmp_path, hw):
    r = axon_cli(
        "nki",
        "profile",
        f"{KERNEL}:exp_kernel",
        "--input",
        "a=float32[128,2048]",
        "--hw",
        hw,
        "--out",
        str(tmp_path),
        "--no-png",
    )
    assert r.returncode == 0, r.stderr
    assert f"on {hw}:" in r.stdout


def test_profile_bad_hardware_is_one_line_and_exit_2(axon_cli, tmp_path):
    r = axon_cli(
        "nki",
        "profile",
        f"{KERNEL}:exp_kernel",
        "--input",
        "a=float32[128,512]",
        "--hw",
        "trn9",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 2
    assert r.stderr.strip().startswith("axon: error:") and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("taken", ["exp_kernel.perfetto.json", "exp_kernel.png"])
def test_profile_out_whose_timeline_name_is_a_directory_is_one_line(axon_cli, tmp_path, taken):
    (tmp_path / taken).mkdir()
    r = axon_cli("nki", "profile", f"{KERNEL}:exp_kernel", "--input", "a=float32[128,512]", "--out", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith("axon: error:") and len(r.stderr.strip().splitlines()) == 1
    assert taken in r.stderr and "directory" in r.stderr
