"""`RecordDB`: the append-only measurement database (SQLite in WAL mode), the source of truth.

Every measurement is committed in its own transaction before anyone else (Optuna, MLflow) is told,
so a crash or `kill -9` loses at most the measurement in flight. Records are never updated or
deleted. Optuna storage and MLflow runs are views that can be rebuilt from here.

Schema 2 (this version) gives each record a `kind` (a tuned `kernel` or a `baseline` measured for
comparison), a `label` (the baseline's name, or the name of a restricted search space, e.g.
`unfused_tuned`) and the `code_version` of the Axon that emitted the kernel. A schema-1 database
(which marked baselines with `workload#label`) is migrated in place when opened, after a copy of
it is kept beside it (`records.db.v1`); no record is dropped.
"""

from __future__ import annotations

import abc
import json
import os
import random
import socket
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from axon import __version__
from axon.errors import StoreError
from axon.workdir import pid_alive

SCHEMA_VERSION = 2
KINDS = ("kernel", "baseline")
# labels of schema-1 records that were baselines (the rest were restricted search spaces)
_V1_BASELINE_LABELS = ("unfused",)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    task TEXT NOT NULL,
    workload TEXT NOT NULL,
    shapes TEXT NOT NULL,
    dtype TEXT NOT NULL,
    hw TEXT NOT NULL,
    hw_hash TEXT NOT NULL,
    backend TEXT NOT NULL,
    variant_hash TEXT NOT NULL,
    point TEXT NOT NULL,
    kernel_hash TEXT NOT NULL,
    features TEXT NOT NULL,
    latency_ns REAL,
    status TEXT NOT NULL,
    error TEXT NOT NULL,
    measurement TEXT NOT NULL,
    axon_version TEXT NOT NULL,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'kernel',
    label TEXT NOT NULL DEFAULT '',
    code_version TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS records_kernel ON records (kernel_hash, backend, hw_hash);
CREATE INDEX IF NOT EXISTS records_task ON records (task);
CREATE TABLE IF NOT EXISTS claims (
    kernel_hash TEXT NOT NULL, backend TEXT NOT NULL, hw_hash TEXT NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (kernel_hash, backend, hw_hash)
);
CREATE TABLE IF NOT EXISTS sweep_tasks (
    sweep TEXT NOT NULL, key TEXT NOT NULL, position INTEGER NOT NULL, status TEXT NOT NULL,
    holder TEXT NOT NULL DEFAULT '', expires REAL NOT NULL DEFAULT 0, result TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (sweep, key)
);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep TEXT PRIMARY KEY, parent TEXT NOT NULL, config TEXT NOT NULL, summarized_by TEXT NOT NULL DEFAULT ''
);
"""

_COLUMNS = (
    "created",
    "task",
    "workload",
    "shapes",
    "dtype",
    "hw",
    "hw_hash",
    "backend",
    "variant_hash",
    "point",
    "kernel_hash",
    "features",
    "latency_ns",
    "status",
    "error",
    "measurement",
    "axon_version",
    "run_id",
    "kind",
    "label",
    "code_version",
)
_JSON = ("shapes", "point", "features", "measurement")


def task_key(workload: str, shapes: dict[str, int], dtype: str, hw_hash: str, label: str = "") -> str:
    """The tuning task a record belongs to (the same string schema 1 stored, so study names keep).

    >>> task_key("softmax", {"N": 8, "M": 4}, "float32", "ab12", "unfused")
    'softmax#unfused[M=4,N=8]:float32@ab12'
    """
    dims = ",".join(f"{k}={v}" for k, v in sorted(shapes.items()))
    name = f"{workload}#{label}" if label else workload
    return f"{name}[{dims}]:{dtype}@{hw_hash}"


def code_version() -> str:
    """The version of the code that emits kernels: the package version, plus the commit when run
    from a git checkout (read from .git, no subprocess)."""
    return _CODE_VERSION


def _git_commit() -> str:
    head = Path(__file__).resolve().parents[2] / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            ref = (head.parent / ref[5:]).read_text().strip()
    except OSError:
        return ""
    return ref[:12]


_CODE_VERSION = __version__ + (f"+g{_git_commit()}" if _git_commit() else "")


@dataclass(frozen=True, kw_only=True)
class Record:
    """One measured (or failed) kernel. `latency_ns` is None unless status == "ok"."""

    workload: str
    shapes: dict[str, int]
    dtype: str
    hw: str
    hw_hash: str
    backend: str
    variant_hash: str
    point: dict[str, Any]
    kernel_hash: str
    features: dict[str, float]
    latency_ns: float | None
    status: str  # "ok" | "error" | "infeasible"
    kind: str = "kernel"  # "kernel" (tuned) | "baseline" (measured for comparison)
    label: str = ""  # a baseline's name, or a restricted search space's; part of the task
    error: str = ""
    measurement: dict[str, Any] = field(default_factory=dict)
    axon_version: str = ""
    code_version: str = ""
    run_id: str = ""
    created: float = 0.0
    id: int | None = None

    @property
    def task(self) -> str:
        return task_key(self.workload, self.shapes, self.dtype, self.hw_hash, self.label)

    @property
    def measured_by(self) -> str:
        """The version of the backend that measured it (`Backend.version`; "" before versions were kept)."""
        return str(self.measurement.get("version", ""))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class _RecordQueries(abc.ABC):
    """The reading side shared by the SQLite and the PostgreSQL record stores: queries are written with
    `?` placeholders and run by the store's `_fetch` (which owns errors, retries and placeholders)."""

    @abc.abstractmethod
    def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """The rows of one statement."""

    def _rows(self, where: str = "", args: tuple[Any, ...] = (), limit: int | None = None) -> Iterator[Record]:
        sql = f"SELECT id, {', '.join(_COLUMNS)} FROM records {where} ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        for row in self._fetch(sql, args):
            data = dict(zip(("id",) + _COLUMNS, row))
            data.pop("task")
            for c in _JSON:
                data[c] = json.loads(data[c])
            yield Record(**data)

    def lookup(self, kernel_hash: str, backend: str, hw_hash: str, version: str = "") -> Record | None:
        """The first record of this kernel measured by this backend at `version` (`Backend.version`)
        on this hardware file, if there is one: a simulator of another version may time it otherwise."""
        for r in self._rows("WHERE kernel_hash=? AND backend=? AND hw_hash=?", (kernel_hash, backend, hw_hash)):
            if r.measured_by == version:
                return r
        return None

    def records(self, task: str | None = None, workload: str | None = None, hw: str | None = None) -> list[Record]:
        clauses, args = [], []
        for column, value in (("task", task), ("workload", workload), ("hw", hw)):
            if value is not None:
                clauses.append(f"{column}=?")
                args.append(value)
        return list(self._rows(("WHERE " + " AND ".join(clauses)) if clauses else "", tuple(args)))

    def best(self, task: str) -> Record | None:
        ok = [(r.latency_ns, r) for r in self.records(task=task) if r.status == "ok" and r.latency_ns is not None]
        return min(ok, key=lambda lr: lr[0])[1] if ok else None

    def __len__(self) -> int:
        return int(self._fetch("SELECT COUNT(*) FROM records")[0][0])

    def export_jsonl(self, path: str | Path) -> int:
        """Write every record as one JSON line (plain, self-describing); returns the count."""
        n = 0
        with open(path, "w") as f:
            for r in self._rows():
                f.write(r.to_json() + "\n")
                n += 1
        return n


class RecordDB(_RecordQueries):
    """Append-only SQLite store of `Record`s.

    >>> import tempfile, os
    >>> db = RecordDB(os.path.join(tempfile.mkdtemp(), "records.db"))
    >>> r = db.add(Record(workload="matmul", shapes={"M": 128}, dtype="float32", hw="trn1", hw_hash="h",
    ...                   backend="sim", variant_hash="v", point={"tile": 128}, kernel_hash="k1",
    ...                   features={"f": 1.0}, latency_ns=1000.0, status="ok"))
    >>> db.lookup("k1", "sim", "h").latency_ns
    1000.0
    """

    def __init__(self, path: str | Path, timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Processes opening a new file at once (workers started together) race to switch it to WAL
        # and create the tables, and SQLite answers the loser "database is locked" at once, without
        # waiting out the busy timeout (1 in 5 sets of 6 simultaneous opens failed): try again until then.
        deadline = time.monotonic() + timeout_s
        while True:
            conn: sqlite3.Connection | None = None
            try:
                conn = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                self._conn = conn
                self._check_schema()
                return
            except sqlite3.DatabaseError as exc:
                if conn is not None:
                    conn.close()
                locked = isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
                if not locked or time.monotonic() > deadline:
                    raise StoreError(self._explain(exc)) from None
                time.sleep(0.02 + 0.05 * random.random())

    def _explain(self, exc: sqlite3.DatabaseError) -> str:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return (
                f"record database {self.path} is locked by another process ({text}); "
                "wait for it or use another --workdir"
            )
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return f"record database {self.path} is corrupt ({text}); move it aside to start a new one"
        return f"record database {self.path}: {text}"

    def _check_schema(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) == 1:
            self._migrate_v1()
        elif int(row[0]) != SCHEMA_VERSION:
            raise StoreError(f"record database {self.path} has schema {row[0]}, this Axon reads {SCHEMA_VERSION}")
        status = self._conn.execute("PRAGMA quick_check").fetchone()[0]
        if status != "ok":
            raise StoreError(f"record database {self.path} is corrupt ({status}); move it aside to start a new one")

    def _migrate_v1(self) -> None:
        """Schema 1 -> 2 in one transaction, after a copy of the file is kept as `<name>.v1`:
        `workload#label` becomes workload + label, with kind `baseline` for the baseline labels;
        the code version of an old record is its Axon version."""
        backup = self.path.with_name(self.path.name + ".v1")
        if not backup.exists():
            with sqlite3.connect(str(backup)) as copy:
                self._conn.backup(copy)
            copy.close()
        before = self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        have = {r[1] for r in self._conn.execute("PRAGMA table_info(records)")}
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for column, default in (("kind", "'kernel'"), ("label", "''"), ("code_version", "''")):
                if column not in have:
                    self._conn.execute(f"ALTER TABLE records ADD COLUMN {column} TEXT NOT NULL DEFAULT {default}")
            self._conn.execute(
                "UPDATE records SET label = substr(workload, instr(workload, '#') + 1), "
                "workload = substr(workload, 1, instr(workload, '#') - 1) WHERE instr(workload, '#') > 0"
            )
            marks = ", ".join("?" for _ in _V1_BASELINE_LABELS)
            self._conn.execute(f"UPDATE records SET kind = 'baseline' WHERE label IN ({marks})", _V1_BASELINE_LABELS)
            self._conn.execute("UPDATE records SET code_version = axon_version WHERE code_version = ''")
            after = self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
            if after != before:  # cannot happen with UPDATEs only; checked because records are the truth
                raise StoreError(f"record database {self.path}: migration changed the record count {before} -> {after}")
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> RecordDB:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # writing -------------------------------------------------------------------------------------
    def add(self, record: Record) -> Record:
        """Commit one record (its own transaction) and return it with its id and time."""
        created = record.created or time.time()
        values = {**asdict(record), "created": created, "task": record.task}
        row = [json.dumps(values[c], sort_keys=True) if c in _JSON else values[c] for c in _COLUMNS]
        try:
            cur = self._conn.execute(
                f"INSERT INTO records ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})", row
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError(self._explain(exc)) from None
        return Record(**{**asdict(record), "created": created, "id": cur.lastrowid})

    def claim(self, kernel_hash: str, backend: str, hw_hash: str) -> bool:
        """Reserve a kernel for measurement by this process; False if a live worker holds it.

        Several workers on one database never measure the same kernel twice: the first claim wins,
        and a claim left by a dead process on this host is taken over.
        """
        me = (socket.gethostname(), os.getpid())
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "SELECT host, pid FROM claims WHERE kernel_hash=? AND backend=? AND hw_hash=?",
                (kernel_hash, backend, hw_hash),
            ).fetchone()
            if row is not None and tuple(row) != me and not (row[0] == me[0] and not pid_alive(row[1])):
                self._conn.execute("COMMIT")
                return False
            self._conn.execute(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                (kernel_hash, backend, hw_hash, me[0], me[1], time.time()),
            )
            self._conn.execute("COMMIT")
            return True
        except sqlite3.DatabaseError as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise StoreError(self._explain(exc)) from None

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """One statement of the sweep queue (`axon.search.fleet`), `?` placeholders: its rows."""
        try:
            return list(self._conn.execute(sql, args).fetchall())
        except sqlite3.DatabaseError as exc:
            raise StoreError(self._explain(exc)) from None

    # reading -------------------------------------------------------------------------------------
    def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return list(self._conn.execute(sql, args).fetchall())
        except sqlite3.DatabaseError as exc:
            raise StoreError(self._explain(exc)) from None
