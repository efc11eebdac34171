"""`axon ui` and `axon runs`: look at the tracking store of a working directory."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import webbrowser
from pathlib import Path
from typing import Any

import click

from axon.cli.common import resolve_workdir, workdir_option
from axon.errors import StoreError
from axon.options import format_sizes
from axon.track.tracker import Tracker
from axon.track.view import runs_url
from axon.workdir import Workdir, pid_alive


def _free_port(preferred: int) -> int:
    """`preferred` when it is free, else (or for 0) a free port: the URL printed must name the port
    the server listens on (port 0 handed to the server left the URL at :0, never answered)."""
    with socket.socket() as s:
        try:
            if preferred:
                s.bind(("127.0.0.1", preferred))
                return preferred
        except OSError:
            pass
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(workdir: Path, port: int) -> tuple[subprocess.Popen, str]:
    """Start the MLflow UI on the working directory's store, bound to 127.0.0.1."""
    uri, root = Workdir(workdir).tracking_uri, Workdir(workdir).artifact_root
    port = _free_port(port)
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        uri,
        "--default-artifact-root",
        root,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    # MLflow 3's server also starts a job runner with seven huey consumers (GenAI evaluation jobs);
    # Axon has no jobs for it, and they are the processes that outlived a stop.
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    log = open(workdir / "mlflow-ui.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise StoreError(
                f"the MLflow UI exited with code {proc.returncode}; see mlflow-ui.log in the working directory"
            )
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise StoreError(f"the MLflow UI did not answer at {url} within {timeout_s:.0f} s")


def _existing(workdir: str | None) -> Path:
    """The working directory, not made; a file there is named as one (it was 'no working directory')."""
    path = Workdir.locate(workdir)
    if path.exists() and not path.is_dir():
        raise StoreError(f"workdir {path} is a file, not a directory: pass another --workdir")
    return path


@click.command()
@workdir_option
@click.option(
    "--port",
    default=5000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port (a free one is chosen if taken, or for 0).",
)
@click.option(
    "--open/--no-open",
    "open_browser",
    default=None,
    help="Open the runs page in a browser [default: when on a terminal with a display].",
)
def ui(workdir: str | None, port: int, open_browser: bool | None) -> None:
    """Start the MLflow UI on the working directory's store (127.0.0.1 only) and print the page of
    its tuning runs; Ctrl-C, SIGTERM or SIGHUP stops it and everything it started."""

    path = _existing(workdir)
    if not path.is_dir():  # a mistyped --workdir served an empty store it had just made
        raise StoreError(f"no working directory {path} (run `axon tune` first, or pass --workdir)")
    if not (path / "mlflow.db").exists():  # a directory that is not a workdir (its parent, a project's) got
        # an mlflow.db, its lock and a log written into it, and an empty runs page was served, as `runs` refuses
        raise StoreError(f"no tracking store in {path} (run `axon tune` first, or pass --workdir)")
    path = resolve_workdir(workdir).root
    # Each of these stops the server. SIGINT is set explicitly: a process started in the background
    # by a non-interactive shell inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt. SIGHUP comes when the terminal or ssh session closes; the server is in its
    # own session, so without this it would outlive us, re-parented to init.
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    proc = None
    try:
        # The store and the experiment exist (made under the store's lock) before the server opens it.
        tracker = Tracker.for_workdir(path)
        tracker.ensure_ui_view()
        proc, base_url = start_ui(path, port)
        wait_healthy(base_url, proc)
        url = runs_url(base_url, tracker.experiment_id)
        click.echo(f"MLflow UI for {path}: {url}  (Ctrl-C to stop)")
        if open_browser or (open_browser is None and _has_display()):
            _open_browser(url)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc is not None:
            for sig in _STOP_SIGNALS:  # a second signal must not cut the stop short
                signal.signal(sig, signal.SIG_IGN)
            stop_ui(proc)


def _has_display() -> bool:
    """A terminal user who can see a browser window (not a pipe, a test or an ssh session)."""
    return sys.stdout.isatty() and (
        sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    )


def _open_browser(url: str) -> None:

    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return
    if type(browser) is webbrowser.GenericBrowser:  # a text browser would take over this terminal
        return
    browser.open(url)


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


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_ui(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop the MLflow server and every process under it (uvicorn and anything it started).

    The process tree is read before any signal, so a child that left the server's session or
    was re-parented when the server exited is still stopped: SIGTERM (uvicorn and the server exit
    on it within ~1 s, on SIGINT in ~3 s), then SIGKILL `grace_s` later, until none is left."""
    pids = {proc.pid} | _descendants(proc.pid)
    for sig, grace in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.time() + grace
        while time.time() < deadline:
            proc.poll()  # reap the server itself
            pids = {pid for pid in pids if pid_alive(pid)}
            if not pids:
                return
            time.sleep(0.1)


@click.command()
@workdir_option
@click.option("-n", "count", default=20, show_default=True, type=click.IntRange(1), help="How many runs (>= 1).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run.")
def runs(workdir: str | None, count: int, as_json: bool) -> None:
    """List recent tuning runs: hardware, shape, dtype, best latency and speedup over unfused."""

    path = _existing(workdir)  # only reads: a mistyped --workdir must not be left behind as a directory
    if not (path / "mlflow.db").exists():
        raise StoreError(f"no tracking store in {path} (run `axon tune` first, or pass --workdir)")
    tracker = Tracker.for_workdir(path)
    tracker.close_orphans()
    rows = [_run_row(r) for r in tracker.recent_runs(count)]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    click.echo(
        f"{'run':<32}  {'name':<24} {'status':<8} {'started':<16} {'hw':<9} {'shape':<30} {'dtype':<8} "
        f"{'best us':>10} {'vs unfused':>10}"
    )
    for row in rows:
        click.echo(_row_line(row))


def _row_line(row: dict) -> str:
    """One run as a line of the table. A cell too long for its column ends in "…": cut silently, a
    family's "M=64,128,192,256,320,N=96,200" read as the complete shape M=64,128,192,256,320."""
    best, speedup = row["best_latency_us"], row["speedup_vs_unfused"]
    return (
        f"{row['run_id']:<32}  {_fit(row['name'], 24):<24} {row['status'][:8]:<8} {row['started']:<16} "
        f"{_cut(row['hw'], 9):<9} {_cut(row['shape'], 30):<30} {_cut(row['dtype'], 8):<8} "
        f"{'' if best is None else f'{best:.2f}':>10} {'' if speedup is None else f'{speedup:.2f}x':>10}"
    )


def _cut(text: str, width: int) -> str:
    """`text` cut to `width`, keeping its start, with "…" where it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _run_row(run: Any) -> dict:
    """One run as `axon runs` shows it; a sweep's parent run has no hw, shape or latency."""
    info, data = run.info, run.data
    return {
        "run_id": info.run_id,
        "name": info.run_name or "",
        "status": info.status,
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(info.start_time / 1000)),
        "workload": data.params.get("workload", ""),
        "hw": _hw_text(data.params.get("hw", "")),
        "shape": _shape_text(data.params.get("shapes", "")),
        "dtype": data.params.get("dtype", ""),
        "best_latency_us": data.metrics.get("best_latency_us"),
        "speedup_vs_unfused": data.metrics.get("speedup_vs_unfused"),
        "parent": data.tags.get("mlflow.parentRunId", ""),
    }


def _fit(text: str, width: int) -> str:
    """`text` cut to `width`, keeping its end (a spec's run name ends in its file and function)."""
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _hw_text(param: str) -> str:
    """The `hw` param: one name for a tuning run, a JSON list (["trn1", "trn2"]) for a sweep's."""

    try:
        names = json.loads(param)
    except ValueError:
        return param
    return ",".join(map(str, names)) if isinstance(names, list) else param


def _shape_text(param: str) -> str:
    """The `shapes` param ({"M": 256, "N": 512}) as `--shape` takes it: M=256,N=512 (a family's
    {"M": [128, 256], "N": 512}: M=128,256,N=512; {"M": [128, 256, 384]}: M=128..384:128)."""

    try:
        bindings = json.loads(param)
    except ValueError:
        return param
    if not isinstance(bindings, dict):
        return param
    return ",".join(f"{name}={format_sizes(size)}" for name, size in bindings.items())
