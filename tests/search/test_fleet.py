"""Sweeps on a fleet against real servers (PostgreSQL; the MLflow server when CI started one):
three workers share a 4-task sweep, one is killed with -9 and restarted, PostgreSQL is stopped for
10 s mid-sweep, and another hardware file never reuses a record."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml

from axon.measure.pgrecords import PgRecordDB, sqlalchemy_url
from axon.search.fleet import Fleet, publish
from axon.search.sweepconfig import load_sweep
from axon.workdir import Workdir
from tests.conftest import REPO, axon_in_process
from tests.servers import PgServer, new_database, pg_bin

TRACKING = os.environ.get("AXON_TEST_TRACKING_URI")  # the MLflow server .ci/run started, if any


def _config(tmp_path: Path, name: str, workloads: list[str], trials: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    entries = [{"workload": w, "preset": "small"} for w in workloads]
    data = {"name": name, "hw": ["trn1"], "backend": "sim", "sampler": "random", "trials": trials, "seed": 0}
    path.write_text(yaml.safe_dump({**data, "entries": entries}))
    return path


def _worker(workdir: Path, url: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "axon.cli", "worker", "--workdir", str(workdir), "--storage", url, "--json"]
    if TRACKING:
        command += ["--tracking-uri", TRACKING]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_records(url: str, n: int, timeout_s: float = 300) -> None:
    db, deadline = PgRecordDB(url), time.time() + timeout_s
    while len(db) < n:
        assert time.time() < deadline, f"fewer than {n} records after {timeout_s} s"
        time.sleep(0.2)
    db.close()


def _measured_twice(url: str) -> int:
    """Kernels measured more than once (copies of an earlier measurement into another task excluded)."""
    db = PgRecordDB(url)
    measured = collections.Counter(
        (r.kernel_hash, r.backend, r.hw_hash) for r in db.records() if "copied_from" not in r.measurement
    )
    return sum(1 for n in measured.values() if n > 1)


def _finished_trials(url: str) -> dict[str, int]:
    storage = optuna.storages.RDBStorage(sqlalchemy_url(url))
    return {
        s.study_name: sum(1 for t in storage.get_all_trials(s._study_id) if t.state.is_finished())
        for s in storage.get_all_studies()
    }


def _publish(config: Path, workdir: Path, url: str) -> str:
    return publish(load_sweep(config), Fleet(Workdir.resolve(workdir), url, None, TRACKING))


@pytest.mark.slow
def test_three_workers_4x16_with_one_killed_and_restarted(tmp_path, pg_url):
    config = _config(tmp_path, "fleet", ["softmax", "rmsnorm", "rmsnorm_matmul", "matmul"], 16)
    sweep = _publish(config, tmp_path / "w", pg_url)
    workers = [_worker(tmp_path / "w", pg_url) for _ in range(3)]
    _wait_for_records(pg_url, 12)
    os.kill(workers[0].pid, signal.SIGKILL)
    workers[0].wait()
    before = {r.id for r in PgRecordDB(pg_url).records()}
    workers[0] = _worker(tmp_path / "w", pg_url)  # restarted
    outputs = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 for w in workers), [err[-4000:] for _, err in outputs]
    after = PgRecordDB(pg_url).records()
    assert before <= {r.id for r in after}  # every record of the killed worker is still there
    trials = _finished_trials(pg_url)
    assert len(trials) == 4 and all(n >= 16 for n in trials.values()), trials
    assert _measured_twice(pg_url) == 0
    summaries = [json.loads(line) for out, _ in outputs for line in out.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and len(summaries[0]["rows"]) == 4  # one summary, by whoever finished last
    assert not [row for row in summaries[0]["rows"] if row["error"]]
    states = PgRecordDB(pg_url).execute("SELECT status FROM sweep_tasks WHERE sweep=?", (sweep,))
    assert [s for (s,) in states] == ["done"] * 4
    print(f"fleet 4x16, 3 workers, one killed: {len(after)} records, trials {sorted(trials.values())}, 0 duplicates")


@pytest.mark.slow
def test_workers_wait_out_a_postgres_restart(tmp_path):
    if pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries (initdb) to stop and start a server of this test's own")
    server = PgServer.create()
    try:
        url = new_database(server.url)
        config = _config(tmp_path, "restart", ["softmax", "rmsnorm"], 10)
        _publish(config, tmp_path / "w", url)
        workers = [_worker(tmp_path / "w", url) for _ in range(2)]
        _wait_for_records(url, 4)
        before = {r.id for r in PgRecordDB(url).records()}
        server.stop()
        # down for 5 s: the workers' backoff (0.2 s doubling, axon.measure.pgrecords.Backoff) has
        # failed five attempts by then; 10 s added nothing but the wait
        threading.Timer(5.0, server.start).start()
        outputs = [w.communicate(timeout=600) for w in workers]
        for _, err in outputs:  # in full in the report (pytest shortens the assertion's strings)
            print(err)
        assert all(w.returncode == 0 for w in workers), [err[-4000:] for _, err in outputs]
        assert before <= {r.id for r in PgRecordDB(url).records()}
        results = PgRecordDB(url).execute("SELECT result FROM sweep_tasks")
        assert not [r for (r,) in results if json.loads(r)["error"]], results
        trials = _finished_trials(url)
        assert len(trials) == 2 and all(n >= 10 for n in trials.values()), trials
        assert _measured_twice(url) == 0
    finally:
        server.remove()


def test_another_hardware_file_never_reuses_a_record(tmp_path, pg_url):
    hw = Path(REPO / "configs" / "hw" / "trn1.yaml")
    recalibrated = tmp_path / "trn1.yaml"
    recalibrated.write_text(hw.read_text() + "\n# recalibrated\n")
    common = ["tune", "softmax", "--preset", "small", "--trials", "4", "--sampler", "random", "--no-track"]
    first = axon_in_process(*common, "--workdir", str(tmp_path / "a"), "--study", "a", "--storage", pg_url, "--json")
    again = axon_in_process(*common, "--workdir", str(tmp_path / "b"), "--study", "b", "--storage", pg_url, "--json")
    other = axon_in_process(
        *common, "--hw", str(recalibrated), "--workdir", str(tmp_path / "c"), "--storage", pg_url, "--json"
    )
    assert first.returncode == again.returncode == other.returncode == 0, other.stderr
    assert json.loads(again.stdout)["reused"] > 0  # another worker, same file: reused
    assert json.loads(other.stdout)["reused"] == 0 and json.loads(other.stdout)["measured"] > 0


def test_unreachable_server_is_one_line_and_exit_2(tmp_path):
    result = axon_in_process("worker", "--workdir", str(tmp_path), "--storage", "postgresql://axon@127.0.0.1:1/x")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "cannot be reached" in result.stderr


def test_every_storage_call_of_optunas_cache_is_retried():
    """Optuna's cached storage calls private methods of its RDB backend (`_set_trial_param`, ...):
    a restarted server must pause those too, not fail the study."""
    import inspect
    import re

    import optuna.storages._cached_storage as cached
    from optuna.storages import RDBStorage

    from axon.search.storage import _RETRIED

    called = set(re.findall(r"self\._backend\.(\w+)\(", inspect.getsource(cached)))
    transactional = {name for name in called if hasattr(RDBStorage, name)} - {
        "get_heartbeat_interval",  # a setting, no query
        "get_heartbeat_stale_trial_callback",
        "delete_study",  # never called while tuning
    }
    assert transactional - set(_RETRIED) == set()


def test_the_errors_of_a_concurrent_table_creation_are_waited_out(pg_url):
    """Workers started together on a new database create Optuna's tables and enum types at once; the
    losers get 'type "studydirection" already exists', 'relation "studies" already exists' or a
    unique violation, depending on the moment (a fleet worker failed on the first in CI: 7 of 64 first
    reaches by 8 processes at once failed). Each error, as the real server gives it, is taken as that
    race and waited out; a statement the server refuses for another reason is not."""
    import sqlalchemy

    from axon.search.storage import _creation_race

    engine = sqlalchemy.create_engine(sqlalchemy_url(pg_url))
    statements = {
        "duplicate type": "CREATE TYPE studydirection AS ENUM ('MINIMIZE')",
        "duplicate table": "CREATE TABLE studies (study_id integer PRIMARY KEY)",
        "unique violation": "INSERT INTO studies VALUES (1)",
    }
    errors = {}
    for name, statement in statements.items():
        for _ in range(2):
            try:
                with engine.begin() as connection:
                    connection.execute(sqlalchemy.text(statement))
            except sqlalchemy.exc.DBAPIError as exc:
                errors[name] = exc
    with pytest.raises(sqlalchemy.exc.DBAPIError) as other, engine.begin() as connection:
        connection.execute(sqlalchemy.text("CREATE TABLE studies (study_id nosuchtype)"))
    engine.dispose()
    assert sorted(errors) == sorted(statements), errors
    assert all(_creation_race(exc) for exc in errors.values()), errors
    assert not _creation_race(other.value)
