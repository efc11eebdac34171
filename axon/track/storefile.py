"""A new SQLite MLflow store starts as a copy of an empty, already migrated one.

MLflow builds a new SQLite store by running its whole chain of schema migrations (about 150
alembic scripts, several seconds and most of a small tune's tracking cost). The migrated empty
schema depends only on the MLflow version, so it is built once per version under
`~/.cache/axon/` and copied. The copy holds no experiment: MLflow creates its Default experiment
on opening, as for a store it migrated itself. Any failure falls back to MLflow's own path.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from axon.lazy import mlflow

CACHE = Path.home() / ".cache" / "axon"


def seed_sqlite_store(db: Path, cache: Path = CACHE) -> bool:
    """Copy the migrated empty schema to `db` when `db` is missing or empty; whether it did. The
    caller holds the store's lock (`axon.track.tracker`), so no other process opens `db` meanwhile."""
    if db.exists() and db.stat().st_size > 0:
        return False
    try:
        template = _template(cache)
        partial = db.with_name(db.name + ".partial")
        shutil.copyfile(template, partial)
        os.replace(partial, db)
        return True
    except (OSError, sqlite3.Error):  # no writable cache, a full disk: MLflow migrates as before
        return False


def _template(cache: Path) -> Path:
    """The empty store of this MLflow version, built on first use (written whole, then renamed into
    place, so a process never copies half of one)."""
    ml = mlflow()
    path = cache / f"mlflow-{ml.__version__}-empty.db"
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        built = Path(scratch) / "empty.db"
        client = ml.tracking.MlflowClient(tracking_uri=f"sqlite:///{built}")
        client.search_experiments()  # opens the store: MLflow migrates it and adds its Default experiment
        with sqlite3.connect(built) as con:
            con.execute("DELETE FROM experiment_tags")
            con.execute("DELETE FROM experiments")
        con.close()
        os.replace(built, path)
    return path
