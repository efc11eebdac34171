"""Shared test helpers."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
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


# A refusal's budget: the refusing process's own CPU time (about 1.1 s measured alone, 2 s wall), so a
# test worker sharing 2 cores with PostgreSQL and sweep workers does not fail on wall time; the
# wall-clock bound catches a refusal that hangs or starts searching before it refuses.
REFUSAL_CPU_S = 4.0
REFUSAL_WALL_S = 30.0


def _children() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def refused(*args: str, cwd: Path | None = None, fragments: tuple[str, ...] = ()) -> str:
    """Run `axon *args`, which must refuse: exit 2, one `axon: error:` line holding every fragment, no
    traceback, within the refusal budget and under 2 GB. Returns the line."""
    (cpu_before, peak_before), start = _children(), time.perf_counter()
    result = run_axon(*args, cwd=cwd)
    elapsed = time.perf_counter() - start
    cpu_after, peak_kb = _children()
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("axon: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert cpu_after - cpu_before < REFUSAL_CPU_S and elapsed < REFUSAL_WALL_S, (cpu_after - cpu_before, elapsed)
    assert peak_kb < 2 * 1024 * 1024 or peak_kb == peak_before, peak_kb  # the largest child so far stayed under 2 GB
    return lines[0]


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
