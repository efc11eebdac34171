"""`PgRecordDB`: the records store on PostgreSQL, for a fleet of workers sharing one database.

The same append-only schema and interface as the SQLite `RecordDB` (records are never updated or
deleted; each is committed in its own transaction before anyone else is told). What differs is
what a network needs: claims are leases that expire (a worker killed with -9 cannot hold a kernel
forever), and every statement is retried with backoff while the server is unreachable (a restarted
PostgreSQL costs a pause, not a lost record). It does not pool connections: one per worker.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from axon.errors import StoreError
from axon.lazy import psycopg
from axon.measure.records import _COLUMNS, _JSON, SCHEMA_VERSION, Record, _RecordQueries
from axon.workdir import pid_alive

T = TypeVar("T")

# servers this process has reached: a later connection to one of them is retried like a statement
# (the server restarting), while a first one fails at once (a wrong URL is not waited for)
_reached: set[str] = set()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id BIGSERIAL PRIMARY KEY,
    created DOUBLE PRECISION NOT NULL,
    task TEXT NOT NULL, workload TEXT NOT NULL, shapes TEXT NOT NULL, dtype TEXT NOT NULL,
    hw TEXT NOT NULL, hw_hash TEXT NOT NULL, backend TEXT NOT NULL, variant_hash TEXT NOT NULL,
    point TEXT NOT NULL, kernel_hash TEXT NOT NULL, features TEXT NOT NULL,
    latency_ns DOUBLE PRECISION, status TEXT NOT NULL, error TEXT NOT NULL, measurement TEXT NOT NULL,
    axon_version TEXT NOT NULL, run_id TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'kernel', label TEXT NOT NULL DEFAULT '', code_version TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS records_kernel ON records (kernel_hash, backend, hw_hash);
CREATE INDEX IF NOT EXISTS records_task ON records (task);
CREATE TABLE IF NOT EXISTS claims (
    kernel_hash TEXT NOT NULL, backend TEXT NOT NULL, hw_hash TEXT NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, created DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (kernel_hash, backend, hw_hash)
);
CREATE TABLE IF NOT EXISTS sweep_tasks (
    sweep TEXT NOT NULL, key TEXT NOT NULL, position INTEGER NOT NULL, status TEXT NOT NULL,
    holder TEXT NOT NULL DEFAULT '', expires DOUBLE PRECISION NOT NULL DEFAULT 0, result TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (sweep, key)
);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep TEXT PRIMARY KEY, parent TEXT NOT NULL, config TEXT NOT NULL, summarized_by TEXT NOT NULL DEFAULT ''
);
"""


def reached(url: str) -> bool:
    """Whether this process has reached the server of `url` before (then it waits for it to return)."""
    return libpq_url(url) in _reached


def is_postgres_url(where: str | os.PathLike[str] | None) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def libpq_url(url: str) -> str:
    """The URL libpq reads (SQLAlchemy's driver suffix removed)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def sqlalchemy_url(url: str) -> str:
    """The URL Optuna's and MLflow's SQLAlchemy read, with psycopg 3 as the driver."""
    return "postgresql+psycopg://" + libpq_url(url).split("://", 1)[1]


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    head, _, rest = url.partition("://")
    if "@" in rest:
        creds, _, host = rest.rpartition("@")
        rest = creds.split(":", 1)[0] + ":***@" + host if ":" in creds else rest
    return f"{head}://{rest}"


class Backoff:
    """Waits between attempts at an unreachable server: 0.2 s doubling to 5 s, for `retry_s` in all."""

    def __init__(self, retry_s: float) -> None:
        self.deadline, self.pause = time.monotonic() + retry_s, 0.2

    def wait(self) -> bool:
        """Sleep before the next attempt; False (no sleep) once `retry_s` has passed: give up."""
        if time.monotonic() > self.deadline:
            return False
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, 5.0)
        return True


class PgRecordDB(_RecordQueries):
    """Append-only PostgreSQL store of `Record`s; the interface of `RecordDB`.

    `lease_s` is how long a claim holds when its worker stops renewing it (a worker measures one
    kernel at a time, so a claim older than that belongs to a dead or stuck worker); `retry_s` is
    how long a statement is retried while the server is unreachable before StoreError.
    """

    def __init__(self, url: str, lease_s: float = 120.0, retry_s: float = 60.0) -> None:
        self.url, self.path = libpq_url(url), redacted(url)
        self.lease_s, self.retry_s = lease_s, retry_s
        self.me = (socket.gethostname(), os.getpid())
        self._conn: Any = None
        self._connect(first=True)

    def _connect(self, first: bool = False) -> None:
        if self.url in _reached:
            self._retry(lambda conn: None)
        else:
            try:
                self._conn = psycopg().connect(self.url, autocommit=True, connect_timeout=5)
            except psycopg().Error as exc:
                raise StoreError(f"record database {self.path} cannot be reached: {_first_line(exc)}") from None
            _reached.add(self.url)
        if first:
            self._retry(lambda conn: self._setup())

    def _setup(self) -> None:
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(271828)")  # one creator of the schema
            self._conn.execute(_SCHEMA)
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self._conn.execute("INSERT INTO meta VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),))
            # a PostgreSQL store starts at schema 2: there is no schema-1 store on PostgreSQL to migrate
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError(f"record database {self.path} has schema {row[0]}, this Axon reads {SCHEMA_VERSION}")

    def _retry(self, work: Callable[[Any], T]) -> T:
        """Run `work(conn)`; on a lost connection reconnect with backoff (0.2 s doubling to 5 s)
        until `retry_s` has passed. A statement that failed is run again whole (each is atomic)."""
        backoff = Backoff(self.retry_s)
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg().connect(self.url, autocommit=True, connect_timeout=5)
                return work(self._conn)
            except psycopg().OperationalError as exc:
                self._conn = None
                if not backoff.wait():
                    raise StoreError(
                        f"record database {self.path} unreachable for {self.retry_s:.0f} s: {_first_line(exc)}"
                    ) from None
            except psycopg().Error as exc:
                raise StoreError(f"record database {self.path}: {_first_line(exc)}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> PgRecordDB:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # writing -------------------------------------------------------------------------------------
    def add(self, record: Record) -> Record:
        """Commit one record and return it with its id and time. A retried insert is not doubled:
        the record's (kernel, backend, hw, task, run, created) identifies it."""
        created = record.created or time.time()
        values = {**asdict(record), "created": created, "task": record.task}
        row = [json.dumps(values[c], sort_keys=True) if c in _JSON else values[c] for c in _COLUMNS]
        sql = (
            f"INSERT INTO records ({', '.join(_COLUMNS)}) SELECT {', '.join('%s' for _ in _COLUMNS)} "
            "WHERE NOT EXISTS (SELECT 1 FROM records WHERE created=%s AND kernel_hash=%s AND task=%s AND run_id=%s) "
            "RETURNING id"
        )

        def insert(conn: Any) -> int:
            got = conn.execute(sql, [*row, created, values["kernel_hash"], values["task"], values["run_id"]]).fetchone()
            if got is not None:
                return int(got[0])
            found = conn.execute(
                "SELECT id FROM records WHERE created=%s AND kernel_hash=%s AND task=%s AND run_id=%s",
                (created, values["kernel_hash"], values["task"], values["run_id"]),
            ).fetchone()
            return int(found[0])

        return Record(**{**asdict(record), "created": created, "id": self._retry(insert)})

    def claim(self, kernel_hash: str, backend: str, hw_hash: str) -> bool:
        """Lease a kernel for measurement; False while another live worker's lease holds it.

        A lease expires `lease_s` after it was taken, and one left by a dead process on this host is
        taken over at once; so a worker killed with -9 delays its kernel, never loses it.
        """
        host, pid = self.me
        now = time.time()

        def take(conn: Any) -> bool:
            with conn.transaction():
                row = conn.execute(
                    "SELECT host, pid, expires FROM claims WHERE kernel_hash=%s AND backend=%s AND hw_hash=%s "
                    "FOR UPDATE",
                    (kernel_hash, backend, hw_hash),
                ).fetchone()
                if row is not None:
                    mine = (row[0], row[1]) == self.me
                    dead = row[0] == host and not pid_alive(row[1])
                    if not (mine or dead or row[2] < now):
                        return False
                conn.execute(
                    "INSERT INTO claims VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (kernel_hash, backend, hw_hash) "
                    "DO UPDATE SET host=EXCLUDED.host, pid=EXCLUDED.pid, created=EXCLUDED.created, "
                    "expires=EXCLUDED.expires",
                    (kernel_hash, backend, hw_hash, host, pid, now, now + self.lease_s),
                )
                return True

        return self._retry(take)

    # reading (the queries are _RecordQueries') ----------------------------------------------------
    def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        text = sql.replace("?", "%s")
        return list(self._retry(lambda conn: conn.execute(text, args).fetchall()))

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """One statement of the sweep queue, `?` placeholders (as SQLite), retried: its rows."""
        text = sql.replace("?", "%s")

        def run(conn: Any) -> list[Any]:
            cur = conn.execute(text, args)
            return list(cur.fetchall()) if cur.description is not None else []

        return self._retry(run)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
