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
    # MLflow 3's server also starts a job runner with seven huey consumers (GenAI evaluation jobs);
    # Axon has no jobs for it, and they are the processes that outlived a stop.
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    log = open(workdir / "mlflow-ui.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
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
    import signal

    path = resolve_workdir(workdir)
    path.mkdir(parents=True, exist_ok=True)
    # Ctrl-C and SIGTERM both stop the server. SIGINT is set explicitly: a process started in the
    # background by a non-interactive shell inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt (the server would outlive a Ctrl-C sent to the process group).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    proc, url = start_ui(path, port)
    try:
        wait_healthy(url, proc)
        click.echo(f"MLflow UI for {path}: {url}  (Ctrl-C to stop)", err=False)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_ui(proc)


def _descendants(pid: int) -> set[int]:
    """Every live descendant of `pid`, read from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:  # a zombie is dead for our purposes (its parent reaps it)
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_ui(proc: subprocess.Popen) -> None:
    """Stop the MLflow server and every process under it (uvicorn and anything it started).

    The process tree is read before any signal, so a child that left the server's session or
    was re-parented when the server exited is still stopped: SIGINT, then SIGTERM, then SIGKILL,
    a few seconds apart, until none is left."""
    import signal

    pids = {proc.pid} | _descendants(proc.pid)
    for sig, grace in ((signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + grace
        while time.time() < deadline:
            proc.poll()  # reap the server itself
            pids = {pid for pid in pids if _alive(pid)}
            if not pids:
                return
            time.sleep(0.1)


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
