"""Which records store a run writes to: the SQLite file in the workdir (the default), or a
PostgreSQL database shared by a fleet of workers (`postgresql://...`).

It chooses and opens; the stores themselves are `axon.measure.records` and `axon.measure.pgrecords`.
"""

from __future__ import annotations

import os
from pathlib import Path

from axon.measure.pgrecords import PgRecordDB, is_postgres_url
from axon.measure.records import RecordDB

Records = RecordDB | PgRecordDB


def records_location(records: str | os.PathLike[str] | None, storage: str | None, default: Path) -> str | Path:
    """`records` as given; else the Optuna `storage` when it is a PostgreSQL URL (one URL for both);
    else `default` (WORKDIR/records.db)."""
    if records:
        return str(records) if is_postgres_url(records) else Path(records).expanduser()  # --records=~/r.db: "./~"
    if is_postgres_url(storage):
        return str(storage)
    return default


def open_records(where: str | os.PathLike[str]) -> Records:
    """The store at `where`: a PostgreSQL URL or a SQLite file path.

    >>> import tempfile, os
    >>> type(open_records(os.path.join(tempfile.mkdtemp(), "records.db"))).__name__
    'RecordDB'
    """
    if is_postgres_url(where):
        return PgRecordDB(str(where))
    return RecordDB(Path(where))
