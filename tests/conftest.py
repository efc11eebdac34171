"""Shared test helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.servers import ENV, PgServer, new_database, pg_bin

REPO = Path(__file__).resolve().parents[1]


def rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    """Normwise maximum relative error: max|a - e| / max|e| (elementwise ratios blow up near 0)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    return float(np.max(np.abs(actual - expected))) / scale


def run_axon(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the `axon` CLI in a subprocess, as a user would."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "axon.cli", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture
def axon_cli():
    return run_axon


@pytest.fixture(scope="session")
def pg_server_url():
    """A PostgreSQL server: $AXON_TEST_PG_URL (CI starts one), else a throwaway one started here;
    the test is skipped, saying why, only when neither is possible."""
    if os.environ.get(ENV):
        yield os.environ[ENV]
        return
    if pg_bin() is None:
        pytest.skip(f"no PostgreSQL: ${ENV} is unset and no initdb is installed (apt-get install postgresql)")
    server = PgServer.create()
    try:
        yield server.url
    finally:
        server.remove()


@pytest.fixture
def pg_url(pg_server_url):
    """A fresh empty database on the test PostgreSQL server."""
    return new_database(pg_server_url)
