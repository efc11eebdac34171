"""The page `axon ui` prints, rendered by a real browser, is the runs table with Axon's metric columns.

Runs experiments/ui_screenshot.py (two tiny tunes, `axon ui`, headless Chromium) only where a
Chromium binary is installed; it is not a CI dependency.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "experiments" / "ui_screenshot.py"


def _find_chromium() -> str | None:
    spec = importlib.util.spec_from_file_location("ui_screenshot", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.find_chromium()


@pytest.mark.slow
@pytest.mark.skipif(
    _find_chromium() is None,
    reason="no Chromium binary (chromium, chromium-browser, google-chrome): the rendered UI is not checked",
)
def test_rendered_ui_opens_on_the_runs_table_with_metric_columns(tmp_path):
    out = tmp_path / "ui.png"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--workdir", str(tmp_path / "work"), "--out", str(out), "--trials", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    assert done.stdout.strip().splitlines()[-1] == "ui_check=ok columns=4/4 runs=2"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
