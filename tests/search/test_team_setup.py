"""The README's team set-up (its ```sh block), run as written: HOST, the ports and /srv/axon
substituted, the database server started as the postgres user when the tests run as root."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.servers import free_port, pg_bin


def team_commands() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", (REPO / "README.md").read_text(), flags=re.S | re.M)
    assert len(blocks) == 1, "the README has one ```sh block: the team set-up"
    return [line for line in blocks[0].splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_team_setup_runs_as_written():
    binary = pg_bin()
    if binary is None:
        pytest.skip("no PostgreSQL server binaries (initdb): apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="axon-team-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    pg_port, ml_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="axon-team-work-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AXON_HOME": str(workdir), "PATH": f"{binary}:{os.environ['PATH']}"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # axon and mlflow of this environment
    server = None
    substitutions = {
        "HOST": "127.0.0.1",
        "5432": str(pg_port),
        "5000": str(ml_port),
        "/srv/axon": str(root),
        "listen_addresses=*": "listen_addresses=127.0.0.1",
        "--host 0.0.0.0": "--host 127.0.0.1",
    }
    try:
        for command in team_commands():
            # one pass over the line: replacing one after another, a free port like 50009 given to
            # PostgreSQL had its "5000" replaced by the MLflow port next ("-p 493459")
            line = re.sub("|".join(map(re.escape, substitutions)), lambda m: substitutions[m.group(0)], command)
            argv = shlex.split(line)
            assignments = {}  # a leading NAME=value sets the command's environment, as the shell does
            while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
                name, value = argv.pop(0).split("=", 1)
                assignments[name] = value
            if argv[0] in ("initdb", "pg_ctl"):
                argv = [*as_owner, str(binary / argv[0]), *argv[1:]]
                if argv[-1] == "start":  # the socket in the throwaway directory, not /var/run/postgresql
                    argv[argv.index("-o") + 1] += f" -k {root}"
            if argv[0] == "mlflow":
                server = subprocess.Popen(
                    argv, cwd=REPO, env={**env, **assignments}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                _wait_healthy(f"http://127.0.0.1:{ml_port}/health")
                continue
            result = subprocess.run(
                argv, cwd=REPO, env={**env, **assignments}, capture_output=True, text=True, timeout=600
            )
            assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"
            if argv[:2] == ["axon", "sweep"]:
                assert "sweep demo: 2 tasks" in result.stdout
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        subprocess.run(
            [*as_owner, str(binary / "pg_ctl"), "-D", str(root / "pg"), "-m", "fast", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_healthy(url: str, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            assert time.time() < deadline, f"the MLflow server did not answer {url} in {timeout_s:.0f} s"
            time.sleep(0.2)
