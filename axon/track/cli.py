"""`axon ui` and `axon runs`: look at the tracking store of a working directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from axon.errors import StoreError


def resolve_workdir(workdir: str | None) -> Path:
    """--workdir, else $AXON_HOME, else ./.axon (the one place the environment is read)."""
    return Path(workdir or os.environ.get("AXON_HOME") or ".axon").resolve()


workdir_option = click.option(
    "--workdir", default=None, help="Working directory with records.db, mlflow.db (default $AXON_HOME or ./.axon)."
)


def _free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def start_ui(workdir: Path, port: int) -> tuple[subprocess.Popen, str]:
    """Start the MLflow UI on the working directory's store, bound to 127.0.0.1."""
    from axon.track.tracker import workdir_store

    uri, root = workdir_store(workdir)
    port = _free_port(port)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--default-artifact-root", root,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = open(workdir / "mlflow-ui.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    import urllib.request

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise StoreError(f"the MLflow UI exited with code {proc.returncode}; see mlflow-ui.log in the working directory")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise StoreError(f"the MLflow UI did not answer at {url} within {timeout_s:.0f} s")


@click.command()
@workdir_option
@click.option("--port", default=5000, show_default=True, type=int, help="Port (a free one is chosen if taken).")
def ui(workdir: str | None, port: int) -> None:
    """Start the MLflow UI on the working directory's store (127.0.0.1 only); Ctrl-C stops it."""
    path = resolve_workdir(workdir)
    path.mkdir(parents=True, exist_ok=True)
    proc, url = start_ui(path, port)
    try:
        wait_healthy(url, proc)
        click.echo(f"MLflow UI for {path}: {url}  (Ctrl-C to stop)", err=False)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_ui(proc)


def stop_ui(proc: subprocess.Popen) -> None:
    """Stop the MLflow server and everything it started (uvicorn, job runners): its whole session.

    Signalling only the `mlflow server` process leaves its uvicorn worker holding the port."""
    import os
    import signal

    for sig, grace in ((signal.SIGINT, 5), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        try:  # the server is gone; its children may linger a moment
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)


@click.command()
@workdir_option
@click.option("-n", "count", default=20, show_default=True, help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run.")
def runs(workdir: str | None, count: int, as_json: bool) -> None:
    """List recent tuning runs with their best latency."""
    import json

    from axon.track.tracker import Tracker

    path = resolve_workdir(workdir)
    if not (path / "mlflow.db").exists():
        raise StoreError(f"no tracking store in {path} (run `axon tune` first, or pass --workdir)")
    tracker = Tracker.for_workdir(path)
    rows = []
    for r in tracker.recent_runs(count):
        rows.append({
            "run_id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.info.start_time / 1000)),
            "workload": r.data.params.get("workload", ""), "hw": r.data.params.get("hw", ""),
            "best_latency_us": r.data.metrics.get("best_latency_us"),
            "parent": r.data.tags.get("mlflow.parentRunId", ""),
        })
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    click.echo(f"{'run':<34} {'name':<28} {'status':<9} {'started':<16} {'best us':>10}")
    for row in rows:
        best = row["best_latency_us"]
        click.echo(f"{row['run_id']:<34} {row['name'][:28]:<28} {row['status']:<9} {row['started']:<16} "
                   f"{'' if best is None else f'{best:10.2f}':>10}")
