"""The package's layers hold (the import-linter contract in pyproject.toml), an upward import is
caught, and the only imports inside functions are the heavy optional libraries, each saying why."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_layers_contract_holds_and_catches_an_upward_import(tmp_path):
    ok = _lint(ROOT, ROOT)
    assert ok.returncode == 0, ok.stdout[-3000:]
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    shutil.copytree(ROOT / "axon", copy / "axon", ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.yaml"))
    stats = copy / "axon" / "ir" / "stats.py"
    stats.write_text(stats.read_text() + "\nfrom axon.search.tuner import Tuner  # an upward import\n")
    broken = _lint(copy, copy)
    assert broken.returncode != 0
    assert "axon.ir is not allowed to import axon.search" in broken.stdout
    assert "axon.ir.stats -> axon.search.tuner" in broken.stdout


def _imports_in_functions() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted((ROOT / "axon").rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        text = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
                        found.append((str(path.relative_to(ROOT)), node.lineno, text))
    return found


def test_imports_inside_functions_are_few_and_each_says_why():
    found = _imports_in_functions()
    assert len(found) <= 10, "\n".join(f"{p}:{n}" for p, n, _ in found)
    for path, line, text in found:
        assert "# lazy:" in text, f"{path}:{line}: an import inside a function must say why (# lazy: <reason>)"


def test_the_cli_imports_no_heavy_or_optional_library():
    """`import axon.cli` (what every `axon` command pays before it starts) leaves the libraries of
    axon.lazy unloaded: each loads when a command first needs it."""
    lazy = ["mlflow", "xgboost", "matplotlib", "psycopg", "sqlalchemy", "neuronxcc"]
    code = f"import json, sys, axon.cli; print(json.dumps([m for m in {lazy!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_the_command_loads_xgboost_without_scikit_learn_and_a_program_keeps_it_whole():
    """The `axon` command (axon.lazy.COMMAND_PROCESS) trains and saves boosters with XGBoost imported
    without scikit-learn, whose import it would otherwise pay in every process; scikit-learn imports
    fine afterwards. A program that imports Axon gets XGBoost as XGBoost imports itself."""
    code = (
        "import json, sys, numpy as np, axon.lazy as lazy\n"
        "lazy.COMMAND_PROCESS = sys.argv[1] == 'command'\n"
        "xgb = lazy.xgboost()\n"
        "loaded = 'sklearn' in sys.modules\n"
        "b = xgb.train({'nthread': 1}, xgb.DMatrix(np.arange(8.0).reshape(4, 2), label=np.arange(4.0)), 2)\n"
        "b.save_model(sys.argv[2])\n"
        "import sklearn\n"
        "print(json.dumps([loaded, xgb.Booster(model_file=sys.argv[2]).num_boosted_rounds()]))"
    )
    for kind, expected in (("command", [False, 2]), ("program", [True, 2])):
        with tempfile.TemporaryDirectory() as d:
            argv = [sys.executable, "-c", code, kind, str(Path(d) / "m.json")]
            out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == expected, (kind, out.stdout)


def test_no_module_of_the_package_is_over_400_lines():
    """Issue 23's bound on a module's length: a file past it is split where its parts separate."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "axon").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, f"modules over 400 lines: {long}"


def test_every_experiment_imports_its_own_checkouts_axon():
    """A script's sys.path starts at its folder and the venv's axon is an editable install of one
    checkout: a script run from another checkout (a worktree) must put its own repository first
    (`import checkout`, or `corpus`, which does the same) before it imports axon."""
    late = []
    for script in sorted((ROOT / "experiments").glob("*.py")):
        if script.name == "corpus.py":
            continue
        body = ast.parse(script.read_text()).body
        first = next((i for i, node in enumerate(body) if _imports_axon(node)), None)
        if first is not None and not any(_puts_repo_first(node) for node in body[:first]):
            late.append(script.name)
    assert not late, f"experiments that may import another checkout's axon: {late}"


def _imports_axon(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == "axon"
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "axon" for a in node.names)


def _puts_repo_first(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name in ("checkout", "corpus") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.module in ("checkout", "corpus")
    return "sys.path.insert(0" in ast.unparse(node)
