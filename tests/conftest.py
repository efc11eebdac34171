"""Shared test helpers."""

from __future__ import annotations

import compileall
import contextlib
import io
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import z3

from axon.cli import main as cli_main
from tests.servers import ENV, PgServer, new_database, pg_bin

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Compile axon's bytecode once, before the test workers start: the tests start many Python
    processes (the README's commands, sweep and fleet workers, the UI), and under
    PYTHONDONTWRITEBYTECODE each would otherwise compile every axon module from source again."""
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        compileall.compile_dir(REPO / "axon", quiet=1)
    else:  # the xdist workers already use the CPUs: a tune in one of them (or its commands) forks no helper
        os.environ.setdefault("AXON_CPUS", "1")


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


def exit_status(exc: SystemExit, err: io.StringIO) -> int:
    """The exit status a process ending with `exc` has, as Python sets it; `sys.exit("message")` also
    writes its message to `err` (the process's stderr), as Python does."""
    if isinstance(exc.code, str):
        err.write(exc.code + "\n")
        return 1
    return int(exc.code or 0)


def axon_in_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the `axon` CLI in this process: `main(argv)` as the entry point calls it, its exit code,
    stdout and stderr as `run_axon` returns them, without the second of imports a new process pays.
    An exception `main` lets through (a traceback a user would see) fails the test where it is raised."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(list(args))
            code = 0
        except SystemExit as exc:
            code = exit_status(exc, err)
    return subprocess.CompletedProcess(["axon", *args], code, out.getvalue(), err.getvalue())


# A refusal's budget: CPU time, so a test worker sharing 2 cores with PostgreSQL and sweep workers does
# not fail on a loaded machine. In a new process a refusal costs about 1.1 s, nearly all of it imports;
# in the test's own process (imports done) a few hundredths: either way far below a search's cost.
REFUSAL_CPU_S = 4.0


def _cpu_and_peak() -> tuple[float, int]:
    """CPU seconds (user + system) of this process and its waited-for children; the larger peak RSS (kB)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    return cpu, max(me.ru_maxrss, children.ru_maxrss)


def refused(*args: str, cwd: Path | None = None, fragments: tuple[str, ...] = (), in_process: bool = True) -> str:
    """Run `axon *args` (in this process, or with in_process=False in a new one as a user would),
    which must refuse: exit 2, one `axon: error:` line holding every fragment, no traceback, within
    the refusal's CPU budget and under 2 GB. Returns the line."""
    cpu_before, peak_before = _cpu_and_peak()
    result = axon_in_process(*args, cwd=cwd) if in_process else run_axon(*args, cwd=cwd)
    cpu_after, peak_kb = _cpu_and_peak()
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("axon: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert cpu_after - cpu_before < REFUSAL_CPU_S, cpu_after - cpu_before
    assert peak_kb < 2 * 1024 * 1024 or peak_kb == peak_before, peak_kb  # the largest process so far stayed under 2 GB
    return lines[0]


@pytest.fixture
def axon_cli():
    return axon_in_process


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


@contextlib.contextmanager
def ctrl_c_during_every_z3_check(monkeypatch: pytest.MonkeyPatch, after_s: float = 0.2):
    """Every Z3 check made one Z3 cannot settle quickly (x^3 + y^3 = z^3 in positive integers, at most
    2 s) and a SIGINT sent `after_s` into it, as a Ctrl-C that lands during a proof."""
    real = z3.Solver.check

    def check(self, *assumptions):
        x, y, z = z3.Ints("x y z", ctx=self.ctx)
        self.reset()
        self.add(x > 0, y > 0, z > 0, x * x * x + y * y * y == z * z * z)
        self.set("rlimit", 0)
        self.set("timeout", 2000)
        threading.Timer(after_s, os.kill, (os.getpid(), signal.SIGINT)).start()
        return real(self, *assumptions)

    monkeypatch.setattr(z3.Solver, "check", check)
    yield
