"""Where a tuning run's search state comes from: the Optuna storage and the starting cost model."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optuna.exceptions import StorageInternalError
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

from axon.errors import StoreError
from axon.lazy import sqlalchemy_exc
from axon.measure.pgrecords import Backoff, is_postgres_url, reached, redacted, sqlalchemy_url
from axon.search.costmodel import CostModel
from axon.search.guards import check_journal, corrupt_journal, no_directory
from axon.track.tracker import load_registered_booster
from axon.workdir import Workdir


def journal_storage(workdir: Workdir, storage: str | None) -> Any:
    """The Optuna storage: a URL as given, else a journal file (default WORKDIR/optuna.log), checked first."""
    if is_postgres_url(storage):
        return retrying_storage(str(storage))
    if storage and "://" in storage:  # another database Optuna takes, opened here: a missing driver or
        try:  # directory was a traceback from inside Optuna (ImportError, OperationalError), exit 1
            return RDBStorage(storage)
        except (ImportError, ValueError, StorageInternalError, sqlalchemy_exc().SQLAlchemyError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise StoreError(
                f"Optuna storage {redacted(storage)} cannot be opened: {reason[0] if reason else type(exc).__name__}"
            ) from None
    path = Path(storage).expanduser() if storage else workdir.journal
    if not path.parent.is_dir():  # FileNotFoundError from inside Optuna, a traceback
        raise StoreError(f"Optuna journal {path}: {no_directory(path.parent)}")
    check_journal(path)
    try:
        return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFlock(str(path))))
    except (AssertionError, KeyError, IndexError, TypeError, ValueError):  # lines that parse but do not replay
        raise StoreError(corrupt_journal(path, "an error replaying it")) from None


class JournalFlock(JournalFileOpenLock):
    """The journal's write lock as an OS lock (`flock` on `optuna.log.flock`), which the kernel
    releases when its holder dies. Optuna's default lock is a symlink that a worker killed with -9
    while appending leaves behind, and the next process to write (the resumed run) waited out its
    30 s grace period before taking it over. (A subclass of Optuna's public lock only for its type:
    both methods are replaced.)"""

    def __init__(self, journal: str) -> None:
        super().__init__(journal)
        self.path = journal + ".flock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def load_cost_model(
    ref: str | None,
    seed: int,
    tracking_uri: str | None = None,
    hw: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> CostModel:
    """A new model, a saved JSON file, or a registered one (`models:/name@alias`).

    When the model was trained on another hardware file than `hw` (by its recorded `hw`, or for a
    registered model by its name `axon-costmodel-<hw>`), `warn` is told once.
    """
    if not ref:
        return CostModel(seed=seed)
    if ref.startswith("models:/"):
        model = CostModel.load(load_registered_booster(ref, tracking_uri, Path(tempfile.mkdtemp()) / "model.json"))
    else:
        model = CostModel.load(ref)
    trained_on = getattr(model, "hw", None) or _hw_from_name(ref)
    if hw and warn and trained_on and hw not in trained_on.split(","):
        warn(f"cost model {ref} was trained on {trained_on}, tuning on {hw}: its ranking may not transfer")
    return model


def _hw_from_name(ref: str) -> str | None:
    m = re.search(r"costmodel-([A-Za-z0-9_]+)", ref)
    return m.group(1) if m else None


# the storage methods a worker calls while tuning, public and the private ones Optuna's cached
# storage calls on its backend directly (`_set_trial_param`, `_create_new_trial`, ...); each is one
# transaction, safe to run again (tests/search/test_fleet.py checks the list covers the cache's calls)
_RETRIED = (
    "_create_new_trial",
    "_set_trial_param",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
    "get_study_name_from_id",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "set_trial_intermediate_value",
    "record_heartbeat",
    "create_new_study",
    "get_study_id_from_name",
    "get_study_directions",
    "get_all_studies",
    "create_new_trial",
    "set_trial_param",
    "set_trial_state_values",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_trial",
    "get_all_trials",
    "get_trial_id_from_study_id_trial_number",
    "get_best_trial",
    "_get_trials",
)


def _connection_lost(exc: BaseException | None) -> bool:
    """The error is the server going away (the connection dropped, or a session left pending by a drop),
    not a statement SQLAlchemy or the database refused."""
    errors = sqlalchemy_exc()
    if isinstance(exc, (errors.OperationalError, errors.InterfaceError, errors.PendingRollbackError)):
        return True
    return isinstance(exc, errors.DBAPIError) and bool(exc.connection_invalidated)


class _RetryingRDBStorage(RDBStorage):
    """Optuna's RDB storage whose calls are retried with backoff while the server is unreachable
    (a restarted PostgreSQL pauses the workers instead of failing their studies)."""

    retry_s = 60.0


def _retried(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: _RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        backoff = Backoff(self.retry_s)
        while True:
            try:
                return method(self, *args, **kwargs)
            except (sqlalchemy_exc().SQLAlchemyError, StorageInternalError) as exc:
                # Optuna wraps an error of a commit in StorageInternalError: retried when its cause is the connection
                lost = exc.__cause__ if isinstance(exc, StorageInternalError) else exc
                if not _connection_lost(lost):
                    raise
                if not backoff.wait():
                    raise StoreError(
                        f"Optuna storage {redacted(self.url)} unreachable for {self.retry_s:.0f} s: "
                        f"{str(getattr(lost, 'orig', None) or lost).strip().splitlines()[0]}"
                    ) from None

    return call


for _name in _RETRIED:
    if hasattr(RDBStorage, _name):
        setattr(_RetryingRDBStorage, _name, _retried(getattr(RDBStorage, _name)))


def retrying_storage(url: str) -> RDBStorage:
    """Optuna's storage on PostgreSQL (psycopg 3), reconnecting after a server restart; a server
    this process reached before is waited for (`retry_s`), a first one fails at once."""
    backoff = Backoff(_RetryingRDBStorage.retry_s)
    while True:
        try:
            return _RetryingRDBStorage(
                sqlalchemy_url(url), engine_kwargs={"pool_pre_ping": True, "connect_args": {"connect_timeout": 5}}
            )
        except (sqlalchemy_exc().SQLAlchemyError, StorageInternalError, ValueError) as exc:
            # a server reached before is waited for; so is one that answered that another process was
            # creating Optuna's tables at the same moment (workers started at once on a new database:
            # 'duplicate key value violates unique constraint "pg_type_typname_nsp_index"', or
            # 'type "studydirection" already exists')
            racing = any(_creation_race(e) for e in (exc, exc.__cause__))
            if (reached(url) or racing) and backoff.wait():
                continue
            reason = getattr(exc, "orig", None) or exc.__cause__ or exc
            raise StoreError(
                f"Optuna storage {redacted(url)} cannot be reached: {str(reason).strip().splitlines()[0]}"
            ) from None


# unique_violation, duplicate_object (a type), duplicate_table: what PostgreSQL answers the second of
# two processes creating the same tables or enum types at once
_RACE_SQLSTATES = frozenset({"23505", "42710", "42P07"})


def _creation_race(exc: BaseException | None) -> bool:
    if isinstance(exc, sqlalchemy_exc().IntegrityError):
        return True
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in _RACE_SQLSTATES


def check_cost_model(ref: str | None, seed: int, tracking_uri: str) -> None:
    """The `--cost-model` every task of a sweep starts from, loaded once before the first task: a
    missing or unreadable one is one line, exit 2 (it failed every task, exit 1)."""
    if ref:
        load_cost_model(ref, seed, tracking_uri)
