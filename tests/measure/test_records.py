"""RecordDB: append-only, deduplicating lookups, survives kill -9, clear errors when unusable."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from axon.errors import StoreError
from axon.measure.records import Record, RecordDB


def _record(i: int, latency: float | None = 100.0, status: str = "ok") -> Record:
    return Record(
        workload="matmul",
        shapes={"M": 128, "N": 256},
        dtype="float32",
        hw="trn1",
        hw_hash="hh",
        backend="sim",
        variant_hash="v0",
        point={"tile_n": 512, "i": i},
        kernel_hash=f"k{i}",
        features={"x": float(i)},
        latency_ns=latency,
        status=status,
    )


def test_add_lookup_best_and_export(tmp_path):
    db = RecordDB(tmp_path / "records.db")
    for i, lat in enumerate([300.0, 100.0, 200.0]):
        db.add(_record(i, lat))
    db.add(_record(9, None, "infeasible"))
    assert len(db) == 4
    assert db.lookup("k1", "sim", "hh").latency_ns == 100.0
    assert db.lookup("k1", "neuron", "hh") is None
    task = _record(0).task
    assert db.best(task).kernel_hash == "k1"
    assert [r.point["i"] for r in db.records(task=task)] == [0, 1, 2, 9]
    assert db.export_jsonl(tmp_path / "out.jsonl") == 4
    db.close()
    # reopened: everything is still there
    assert len(RecordDB(tmp_path / "records.db")) == 4


def test_records_survive_kill_9(tmp_path):
    path = tmp_path / "records.db"
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {os.getcwd()!r})
        from axon.measure.records import Record, RecordDB
        db = RecordDB({str(path)!r})
        i = 0
        while True:
            db.add(Record(workload="w", shapes={{"M": 1}}, dtype="float32", hw="trn1", hw_hash="h",
                          backend="sim", variant_hash="v", point={{"i": i}}, kernel_hash=f"k{{i}}",
                          features={{}}, latency_ns=1.0 + i, status="ok"))
            print(i, flush=True)
            i += 1
            time.sleep(0.002)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acknowledged = -1
    deadline = time.time() + 30
    while acknowledged < 50 and time.time() < deadline:
        acknowledged = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    db = RecordDB(path)
    # every record the writer acknowledged is there, none is half-written
    assert len(db) >= acknowledged + 1
    assert [r.point["i"] for r in db.records()] == list(range(len(db)))


def test_corrupt_database_is_a_clear_error(tmp_path):
    path = tmp_path / "records.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"records\.db is corrupt"):
        RecordDB(path)


def test_locked_database_is_a_clear_error(tmp_path):
    path = tmp_path / "records.db"
    RecordDB(path).close()
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        db = None
        with pytest.raises(StoreError, match="locked by another process"):
            db = RecordDB(path, timeout_s=0.2)
            db.add(_record(0))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_neuron_backend_says_plainly_it_cannot_run_here():
    from axon.errors import BackendError
    from axon.measure import NeuronBackend, get_backend

    assert NeuronBackend.available() is not None
    with pytest.raises(BackendError, match="backend 'neuron' cannot run here"):
        get_backend("neuron")
    with pytest.raises(BackendError, match="unknown backend 'gpu'"):
        get_backend("gpu")


def test_claims_keep_workers_from_measuring_one_kernel_twice(tmp_path):
    path = tmp_path / "records.db"
    db = RecordDB(path)
    assert db.claim("k", "sim", "h")
    assert db.claim("k", "sim", "h")  # the holder may claim again
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from axon.measure.records import RecordDB; print(RecordDB({str(path)!r}).claim('k', 'sim', 'h'))",
        ],
        capture_output=True,
        text=True,
        cwd=os.getcwd(),
    )
    assert other.stdout.strip() == "False"  # this process is alive and holds it
    # a claim whose process died is taken over
    db._conn.execute("UPDATE claims SET pid=999999999")
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from axon.measure.records import RecordDB; print(RecordDB({str(path)!r}).claim('k', 'sim', 'h'))",
        ],
        capture_output=True,
        text=True,
        cwd=os.getcwd(),
    )
    assert other.stdout.strip() == "True"


# The schema-1 layout as Axon 0.1 wrote it (baselines marked by `workload#label`).
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, task TEXT NOT NULL, workload TEXT NOT NULL,
    shapes TEXT NOT NULL, dtype TEXT NOT NULL, hw TEXT NOT NULL, hw_hash TEXT NOT NULL, backend TEXT NOT NULL,
    variant_hash TEXT NOT NULL, point TEXT NOT NULL, kernel_hash TEXT NOT NULL, features TEXT NOT NULL,
    latency_ns REAL, status TEXT NOT NULL, error TEXT NOT NULL, measurement TEXT NOT NULL,
    axon_version TEXT NOT NULL, run_id TEXT NOT NULL
);
CREATE TABLE claims (kernel_hash TEXT NOT NULL, backend TEXT NOT NULL, hw_hash TEXT NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, created REAL NOT NULL, PRIMARY KEY (kernel_hash, backend, hw_hash));
INSERT INTO meta VALUES ('schema_version', '1');
"""


def _v1_file(path, names):
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    for i, name in enumerate(names):
        task = f"{name}[M=4]:float32@h"
        conn.execute(
            "INSERT INTO records (created, task, workload, shapes, dtype, hw, hw_hash, backend, variant_hash, point, "
            "kernel_hash, features, latency_ns, status, error, measurement, axon_version, run_id) "
            "VALUES (?, ?, ?, '{\"M\": 4}', 'float32', 'trn1', 'h', 'sim', 'v', ?, ?, '{}', ?, 'ok', '', '{}', "
            "'0.1.0', '')",
            (1.0 + i, task, name, json.dumps({"i": i}), f"k{i}", 100.0 + i),
        )
    conn.commit()
    conn.close()


def test_a_schema_1_database_migrates_with_every_record_and_task_kept(tmp_path):
    path = tmp_path / "records.db"
    names = ["softmax"] * 5 + ["softmax#unfused"] + ["softmax#unfused_tuned"] * 3 + ["matmul"] * 2
    _v1_file(path, names)
    before = sqlite3.connect(path).execute("SELECT id, task, kernel_hash, latency_ns FROM records").fetchall()
    db = RecordDB(path)
    records = db.records()
    assert len(records) == len(before) == 11
    assert [(r.id, r.task, r.kernel_hash, r.latency_ns) for r in records] == before  # same ids, tasks, figures
    kinds = [(r.workload, r.kind, r.label) for r in records]
    assert kinds.count(("softmax", "baseline", "unfused")) == 1
    assert kinds.count(("softmax", "kernel", "unfused_tuned")) == 3
    assert kinds.count(("softmax", "kernel", "")) == 5 and kinds.count(("matmul", "kernel", "")) == 2
    assert all(r.code_version == "0.1.0" for r in records)
    assert (tmp_path / "records.db.v1").exists()  # the schema-1 file is kept as it was
    assert sqlite3.connect(tmp_path / "records.db.v1").execute("SELECT COUNT(*) FROM records").fetchone()[0] == 11
    db.close()
    again = RecordDB(path)  # opening a migrated file again changes nothing
    assert [(r.id, r.task, r.kind, r.label) for r in again.records()] == [
        (r.id, r.task, r.kind, r.label) for r in records
    ]
    assert again.lookup("k5", "sim", "h").kind == "baseline"


def test_a_newer_schema_is_refused_with_one_line(tmp_path):
    path = tmp_path / "records.db"
    RecordDB(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="has schema 9"):
        RecordDB(path)


def _open_at_once(paths, barrier, results):
    for rep, path in enumerate(paths):
        barrier.wait()
        try:
            RecordDB(path).close()
            results.put((rep, "ok"))
        except StoreError as exc:
            results.put((rep, str(exc)))


def test_workers_opening_a_new_database_at_once_all_open_it(tmp_path):
    # six processes creating one records.db together: SQLite answered the losers of the race to switch
    # it to WAL "database is locked" at once, without waiting (1 in 5 such sets failed, a fleet worker
    # started beside another exited 2); the same six processes open 25 new databases in turn
    ctx = multiprocessing.get_context("fork")
    paths = [tmp_path / f"r{rep}" / "records.db" for rep in range(25)]
    barrier, results = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_open_at_once, args=(paths, barrier, results)) for _ in range(6)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=60) for _ in range(6 * len(paths)))
    for p in procs:
        p.join()
    assert got == sorted((rep, "ok") for rep in range(len(paths)) for _ in range(6)), [g for g in got if g[1] != "ok"][
        :1
    ]
