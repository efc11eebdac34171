"""A wheel built from this repository, installed into a fresh venv outside the checkout, works.

The user's path: `pip install .`, then `axon tune` from some other directory. The wheel is built
(with build isolation: the test venv's setuptools is older than pyproject's `setuptools>=77`; about
2 s from pip's cache) from a copy of the repository, installed with `--no-deps` into a new venv
that borrows its dependencies from this test environment's site-packages through a `.pth` file
(no download), and every check runs that venv's `axon` from a directory that is not a checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from axon.target import builtin_hw, load_hw

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOT_SOURCE = (
    ".git",
    ".venv",
    ".axon",
    "experiments",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "mlruns",
    "mlartifacts",
    "mlflow.db",
)


class Installed:
    def __init__(self, root: Path):
        self.root = root
        self.venv = root / "venv"
        self.python = self.venv / "bin" / "python"
        self.elsewhere = root / "elsewhere"  # the working directory of every command: not a checkout

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "AXON_HOME")}
        env.update(OMP_NUM_THREADS="1", PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        return subprocess.run(list(argv), cwd=self.elsewhere, env=env, capture_output=True, text=True, timeout=timeout)

    def axon(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(str(self.venv / "bin" / "axon"), *args)

    def python_json(self, code: str) -> dict:
        result = self.run(str(self.python), "-c", code)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])


# session-scoped: with --dist worksteal another module's test can run between two of these, and a
# module-scoped fixture would then be torn down and the wheel built and installed again
@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    # a copy, so that setuptools' build/ staging (which keeps files between builds) never lands in the checkout
    source = tmp_path_factory.mktemp("source") / "axon"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("axon-*.whl")
    return path


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Installed:
    site = Installed(tmp_path_factory.mktemp("user"))
    site.elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(site.venv)], check=True, timeout=120)
    # the test environment's pip installs into the new venv (`--python`): no pip bootstrap per run
    # without PYTHONPATH: a checkout on it (PYTHONPATH=. pytest) made pip find axon "already satisfied"
    # and install nothing, so every check ran without the package
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(site.python), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    purelib = site.python_json("import json, sysconfig; print(json.dumps(sysconfig.get_paths()))")["purelib"]
    # dependencies from this environment, after the venv's own site-packages (axon comes from the wheel)
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(purelib, "_axon_test_dependencies.pth").write_text("".join(f"{p}\n" for p in deps))
    return site


def test_wheel_carries_hardware_files_cost_model_and_py_typed(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "axon/py.typed" in names
    assert any(n.startswith("axon/") and n.endswith("/axon-costmodel-trn1.json") for n in names)
    hashes = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in names:
            if name.endswith(".yaml"):
                hashes[Path(name).stem] = hashlib.sha256(zf.read(name)).hexdigest()[:16]
    # the same bytes as the checkout's: file_hash keys every measurement record
    assert hashes == {name: load_hw(name).file_hash for name in builtin_hw()}


def test_installed_package_is_the_wheel_and_loads_every_builtin_hardware_file(installed):
    found = installed.python_json(
        "import json, axon; from importlib.resources import files; from axon.target import builtin_hw, load_hw\n"
        "print(json.dumps({'file': axon.__file__, 'typed': (files('axon') / 'py.typed').is_file(),\n"
        "                  'hw': {n: [load_hw(n).file_hash, load_hw(n).source] for n in builtin_hw()},\n"
        "                  'trn2': load_hw('trn2').memory.sbuf_bytes_per_partition}))"
    )
    assert Path(found["file"]).resolve().is_relative_to(installed.venv.resolve())
    assert not Path(found["file"]).resolve().is_relative_to(REPO)
    assert found["typed"] and found["trn2"] == 229376
    assert {n: h for n, (h, _) in found["hw"].items()} == {n: load_hw(n).file_hash for n in ("trn1", "trn2")}
    assert all(Path(source).resolve().is_relative_to(installed.venv.resolve()) for _, source in found["hw"].values())


def test_installed_axon_hw_by_name_and_by_documented_path(installed):
    for ref in ("trn1", "configs/hw/trn1.yaml"):  # the path form the README and docs use, from a non-checkout
        shown = installed.axon("hw", ref)
        assert shown.returncode == 0, shown.stderr
        assert (
            f"sha256 {load_hw('trn1').file_hash}" in shown.stdout and "sbuf_bytes_per_partition=196608" in shown.stdout
        )
    missing = installed.axon("hw", "trn9")
    assert missing.returncode == 2 and "built-in: trn1, trn2" in missing.stderr


def test_installed_axon_tunes_from_another_directory(installed):
    workdir = installed.root / "work"
    tuned = installed.axon("tune", "rmsnorm", "--preset", "small", "--trials", "2", "--workdir", str(workdir))
    assert tuned.returncode == 0, tuned.stderr
    kernels = list((workdir / "kernels").glob("rmsnorm_trn1_*.py"))
    assert len(kernels) == 1 and f"kernel: {kernels[0]}" in tuned.stdout
    assert "def " in kernels[0].read_text()


@pytest.mark.parametrize("ref", ["trn1", "models/axon-costmodel-trn1.json"])
def test_installed_axon_tunes_from_the_shipped_cost_model_by_name_or_path(installed, ref):
    workdir = installed.root / f"work-{ref.replace('/', '_')}"
    tuned = installed.axon(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        "2",
        "--cost-model",
        ref,
        "--no-track",
        "--quiet",
        "--json",
        "--workdir",
        str(workdir),
    )
    assert tuned.returncode == 0, tuned.stderr
    report = json.loads(tuned.stdout)
    assert Path(report["kernel_path"]).is_file()
    assert "trained on" not in tuned.stderr  # the trn1 model on trn1: no transfer warning
