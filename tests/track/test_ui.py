"""`axon ui`: serves the working directory's runs, opens on Axon's runs view, and stops its whole
process tree on Ctrl-C, SIGTERM and SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from axon.cli.track import _descendants
from axon.cli.track import _free_port as ui_free_port
from axon.track import Tracker
from axon.track.view import VIEW_TAG, column_id, runs_url
from axon.workdir import pid_alive
from tests.conftest import REPO, refused


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_axon_ui(workdir) -> tuple[subprocess.Popen, str]:
    """`axon ui` in its own session, as from a terminal; returns it and the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "axon.cli", "ui", "--workdir", str(workdir), "--port", str(_free_port())],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = proc.stdout.readline()  # printed once the server is healthy
    if "http://127.0.0.1:" not in line:
        proc.kill()
        pytest.fail(f"axon ui printed {line!r}; stderr: {proc.stderr.read()[-800:]}")
    return proc, next(tok for tok in line.split() if tok.startswith("http://"))


def _base(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _answers(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/health", timeout=2):
            return True
    except OSError:
        return False


def _api(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_axon_ui_serves_runs_and_prints_the_runs_view(tmp_path):
    tracker = Tracker.for_workdir(tmp_path)
    with tracker.run("tune matmul", params={"workload": "matmul", "hw": "trn1"}) as run:
        run.log_metrics({"best_latency_us": 42.0, "speedup_vs_unfused": 3.0, "roofline_fraction": 0.5})
    proc, url = _start_axon_ui(tmp_path)
    tree = _descendants(proc.pid)
    try:
        base = _base(url)
        assert url == runs_url(base, tracker.experiment_id)
        found = _api(
            base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [tracker.experiment_id], "max_results": 10}
        )["runs"]
        assert [r["info"]["run_id"] for r in found] == [run.run_id]
        assert {m["key"]: m["value"] for m in found[0]["data"]["metrics"]}["best_latency_us"] == 42.0
        # the saved view the URL names is on the experiment, as the UI reads it, with the metric columns
        experiment = _api(base, f"/api/2.0/mlflow/experiments/get?experiment_id={tracker.experiment_id}")["experiment"]
        tags = {t["key"]: t["value"] for t in experiment["tags"]}
        state = json.loads(json.loads(tags[VIEW_TAG])["state"])
        for metric in ("best_latency_us", "speedup_vs_unfused", "speedup_vs_expert", "roofline_fraction"):
            assert column_id("metrics", metric) in state["selectedColumns"]
    finally:
        proc.send_signal(signal.SIGHUP)  # a closed terminal: the whole tree stops (SIGTERM below, Ctrl-C in
        # tests/test_readme.py's tour, each with a server of its own: one start is 7.5 CPU-s)
        try:
            proc.wait(timeout=30)
        finally:
            _stop(proc)
    assert proc.returncode == 0
    deadline = time.time() + 10
    while any(pid_alive(pid) for pid in tree) and time.time() < deadline:
        time.sleep(0.1)
    assert len(tree) >= 2 and not any(pid_alive(pid) for pid in tree), tree
    assert not _answers(base)


@pytest.mark.slow
def test_axon_ui_stops_its_whole_process_tree_on_sigterm(tmp_path):
    """`kill` goes to `axon ui` alone; the MLflow server runs in a session of its own and gets nothing
    from outside, so `axon ui` must stop it and all under it."""
    sig = signal.SIGTERM
    Tracker.for_workdir(tmp_path)  # a workdir's store: `axon ui` refuses a directory without one
    proc, url = _start_axon_ui(tmp_path)
    tree: set[int] = set()
    try:
        tree = _descendants(proc.pid)
        assert len(tree) >= 2, tree  # the MLflow server and its uvicorn
        sent = time.time()
        proc.send_signal(sig)
        proc.wait(timeout=15)
        left = {pid for pid in tree if pid_alive(pid)}
        while left and time.time() < sent + 15:
            time.sleep(0.1)
            left = {pid for pid in left if pid_alive(pid)}
        stopped_after = time.time() - sent
    finally:
        for pid in tree:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        _stop(proc)
    assert proc.returncode == 0
    assert not left, f"still running {stopped_after:.1f} s after {sig.name}: {left}"
    assert stopped_after < 10
    assert not _answers(_base(url))


def test_stop_ui_stops_children_that_left_the_session(tmp_path):
    """A grandchild in its own session, re-parented when the server exits, is stopped too."""
    from axon.cli.track import stop_ui

    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'],"
        " start_new_session=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.time() + 10
    while not _descendants(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    children = _descendants(proc.pid)
    assert len(children) == 1
    # the grandchild ignores SIGTERM, so it is stopped only by the SIGKILL after the grace: 0.5 s of
    # it here (the default 5 s is for a real server's shutdown, which nothing here has)
    stop_ui(proc, grace_s=0.5)
    assert proc.poll() is not None
    assert not any(pid_alive(pid) for pid in children)


@pytest.mark.slow
def test_workers_on_one_study_record_into_one_tracking_server(tmp_path):
    """Two `axon tune` workers share an Optuna journal study and log to one MLflow server."""
    from axon.cli.track import start_ui, stop_ui, wait_healthy

    server_dir = tmp_path / "server"
    server_dir.mkdir()
    proc, url = start_ui(server_dir, _free_port())
    try:
        wait_healthy(url, proc)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [
            sys.executable,
            "-m",
            "axon.cli",
            "tune",
            "softmax",
            "--preset",
            "small",
            "--trials",
            "6",
            "--sampler",
            "random",
            "--workdir",
            str(tmp_path / "work"),
            "--study",
            "shared",
            "--tracking-uri",
            url,
            "--quiet",
            "--json",
        ]
        workers = [
            subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [w.communicate(timeout=600) for w in workers]
        assert all(w.returncode == 0 for w in workers), [o[1][-800:] for o in outs]
        run_ids = {json.loads(o[0].strip().splitlines()[-1])["run_id"] for o in outs}
        tracker = Tracker(url)
        found = {r.info.run_id for r in tracker.recent_runs(10)}
        assert len(run_ids) == 2 and run_ids <= found
    finally:
        stop_ui(proc)


def test_port_zero_gets_a_free_port_the_url_names_and_a_port_out_of_range_is_refused():
    """--port 0 was handed to the server as is: the URL waited on and printed was :0 (nothing for
    60 s, then an error); --port 70000 or -1 was an OverflowError traceback."""
    port = ui_free_port(0)
    assert 0 < port < 65536
    for bad in ("70000", "-1"):
        refused("ui", "--port", bad, fragments=("'--port'", "0<=x<=65535"))


def test_ui_on_a_working_directory_that_does_not_exist_is_refused(tmp_path):
    """`axon ui --workdir typo` made the directory and an empty store, and served that."""
    refused("ui", "--workdir", str(tmp_path / "typo"), fragments=("no working directory", "typo"))
    assert not (tmp_path / "typo").exists()


def test_ui_on_a_directory_without_a_tracking_store_is_refused_and_left_as_it_was(tmp_path):
    """`axon ui --workdir DIR` of a directory that is not a workdir (its parent, a project) wrote an
    mlflow.db, its lock and mlflow-ui.log into it and served an empty runs page; `runs` refused it."""
    (tmp_path / "notes.txt").write_text("mine\n")
    for command in ("ui", "runs"):
        refused(command, "--workdir", str(tmp_path), fragments=("no tracking store in", str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_ui_and_runs_on_a_workdir_that_is_a_file_name_it_as_one(tmp_path):
    """Both said 'no working directory X' of a file that is there; `axon tune` says what it is."""
    (tmp_path / "f").write_text("notes\n")
    for command in ("ui", "runs"):
        refused(
            command, "--workdir", str(tmp_path / "f"), fragments=("is a file, not a directory", str(tmp_path / "f"))
        )
    assert (tmp_path / "f").read_text() == "notes\n"
