"""Kernel files that import a framework which is not installed here (torch, torch_xla, loguru, ...)
for their host code load in the emulator; the framework is never faked into a result."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import axon.nki
from axon.nki.standins import FRAMEWORKS
from tests.conftest import refused

_HOST_IMPORTS = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch
import torch_xla.core.xla_model as xm
from torch.profiler import ProfilerActivity, profile
from loguru import logger
from typing import Tuple


def device() -> Tuple[torch.tensor, torch.tensor]:
    return xm.xla_device()


@nki.jit
def double(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=nl.multiply(t, 2.0))
    return out
"""


@pytest.fixture
def not_installed():
    missing = [m for m in ("torch", "torch_xla", "loguru") if m in FRAMEWORKS]
    for name in missing:
        try:
            __import__(name)
        except ImportError:
            continue
        pytest.skip(f"{name} is installed here: its real module is imported, no stand-in")
    return missing


def test_a_kernel_file_importing_frameworks_that_are_not_installed_runs(tmp_path, not_installed):
    # AWS's softmax tutorial failed with "No module named 'torch_xla'" for an import only its host code uses
    path = tmp_path / "host.py"
    path.write_text(_HOST_IMPORTS)
    kernel = axon.nki.load_kernel(f"{path}:double")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(axon.nki.run(kernel, a), 2 * a)
    assert not [m for m in not_installed if m in sys.modules]  # gone again: libraries probe sys.modules["torch"]
    host = axon.nki.load_kernel(f"{path}:device")
    with pytest.raises(ModuleNotFoundError, match=r"xla_model.xla_device\(\.\.\.\) was called, but torch_xla"):
        host()


def test_host_code_that_runs_the_framework_at_import_is_one_line(tmp_path, not_installed):
    path = tmp_path / "seeded.py"
    path.write_text(_HOST_IMPORTS + "\ntorch.manual_seed(0)\n")
    refused(
        "nki", "run", f"{path}:double", "--input", "a=float32[3,4]",
        fragments=("cannot load kernel file", "torch.manual_seed(...) was called, but torch is not installed"),
    )  # fmt: skip
