"""PgRecordDB against a real PostgreSQL server: the RecordDB interface, leases that a killed
worker cannot hold forever, the hardware-file hash in every lookup, and a server restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from axon.errors import StoreError
from axon.measure.pgrecords import PgRecordDB, redacted
from axon.measure.stores import open_records, records_location
from tests.conftest import REPO
from tests.measure.test_records import _record
from tests.servers import PgServer, free_port, new_database, pg_bin


def test_same_interface_as_sqlite(pg_url, tmp_path):
    db = open_records(pg_url)
    assert isinstance(db, PgRecordDB)
    for i, lat in enumerate([300.0, 100.0, 200.0]):
        db.add(_record(i, lat))
    db.add(_record(9, None, "infeasible"))
    assert len(db) == 4
    assert db.lookup("k1", "sim", "hh").latency_ns == 100.0
    assert db.lookup("k1", "neuron", "hh") is None
    assert db.lookup("k1", "sim", "another-hw-file") is None  # another hardware file never reuses
    task = _record(0).task
    assert db.best(task).kernel_hash == "k1"
    assert [r.point["i"] for r in db.records(task=task)] == [0, 1, 2, 9]
    assert db.export_jsonl(tmp_path / "out.jsonl") == 4
    db.close()
    assert len(PgRecordDB(pg_url)) == 4  # a second worker sees them


def test_one_url_for_studies_and_records(tmp_path):
    url = "postgresql://axon@127.0.0.1:5432/axon"
    assert records_location(None, url, tmp_path / "records.db") == url
    assert records_location("r.db", url, tmp_path / "records.db").name == "r.db"
    assert records_location(None, None, tmp_path / "records.db") == tmp_path / "records.db"
    assert redacted("postgresql://me:secret@db:5432/x") == "postgresql://me:***@db:5432/x"


def test_a_lease_holds_then_expires(pg_url):
    holder, other = PgRecordDB(pg_url, lease_s=1.0), PgRecordDB(pg_url)
    holder.me = ("machine-a", 1)  # two machines: a dead pid on another host is not visible here
    other.me = ("machine-b", 1)
    assert holder.claim("k", "sim", "h")
    assert not other.claim("k", "sim", "h")
    assert other.claim("k", "sim", "another-hw-file")
    time.sleep(1.2)
    assert other.claim("k", "sim", "h")  # the holder stopped renewing: its lease is over


def test_a_claim_of_a_worker_killed_with_9_is_taken_over(pg_url):
    script = (
        "import sys, time; from axon.measure.pgrecords import PgRecordDB; "
        f"print(PgRecordDB({pg_url!r}).claim('k', 'sim', 'h'), flush=True); time.sleep(60)"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "True"
    mine = PgRecordDB(pg_url)
    assert not mine.claim("k", "sim", "h")  # alive: it holds
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    assert mine.claim("k", "sim", "h")  # dead: taken over at once, not after the lease


def test_unreachable_server_is_one_clear_error():
    with pytest.raises(StoreError, match=r"cannot be reached"):
        PgRecordDB(f"postgresql://axon:pw@127.0.0.1:{free_port()}/x")


OUTAGE_S = 4.0


def test_records_survive_a_server_restart():
    if pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries (initdb) to start and stop a server of this test's own")
    server = PgServer.create()
    try:
        db = PgRecordDB(new_database(server.url))
        db.add(_record(0))
        server.stop()
        # down for 4 s, longer than the backoff's first five attempts take (0.2 + 0.4 + 0.8 + 1.6 s
        # apart): the add fails and is retried several times (the workers' 10 s outage is test_fleet's)
        restart = threading.Timer(OUTAGE_S, server.start)
        restart.start()
        start = time.monotonic()
        db.add(_record(1))  # retried with backoff until the server is back
        assert time.monotonic() - start >= OUTAGE_S - 1.0
        restart.join()
        db.add(_record(2))
        assert sorted(r.kernel_hash for r in db.records()) == ["k0", "k1", "k2"]
    finally:
        server.remove()
